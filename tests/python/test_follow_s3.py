"""Follow mode over s3:// (docs/FORMAT.md §6.1 "Object storage"): the s3 writer keeps its journal
in its local staging directory and puts manifest.json last, so a follower of the URL waits for the
manifest, then serves the complete dataset as its follow epoch. Against a real S3 server on
127.0.0.1 (moto) behind the proxy of s3_server.py."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest

import libshard
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-follow"
CHILD = Path(__file__).resolve().parent / "follow_writer_child.py"


server = server_fixture(bucket=BUCKET)
proxy = proxy_fixture()
env = env_fixture(LIBSHARD_S3_STAGING=lambda tmp: tmp / "staging",
                  LIBSHARD_CACHE_DIR=lambda tmp: tmp / "cache")


def test_a_follower_of_an_s3_write_serves_it_once_its_manifest_is_up(env):
    url = f"s3://{BUCKET}/followed"
    n = 12
    seen: List[int] = []
    errors: List[BaseException] = []
    loader = libshard.Loader(url, follow=True, batch_size=2, slow_wait_warning_seconds=60)
    ds = libshard.open(url, follow=True)
    assert len(ds) == 0 and "manifest.json" in ds.progress["waiting_for"]

    def follow() -> None:
        try:
            for step in loader:
                seen.extend(int(s["ident"][0]) for s in step)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    t = threading.Thread(target=follow)
    t.start()
    r = subprocess.run([sys.executable, str(CHILD), url, str(n)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    t.join(timeout=120)
    assert not t.is_alive() and not errors, errors
    assert sorted(seen) == list(range(n))
    assert ds.wait(timeout=30) and len(ds) == n
