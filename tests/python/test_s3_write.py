"""Writing datasets to s3:// (docs/guide/object-storage.md, "Writing"): libshard.Writer, pack -o
and merge -o upload through a local staging directory, shards by multipart upload, index and
manifest last; a killed writer resumes without uploading a finished part again. Against a real S3
server on 127.0.0.1 (moto, signature checking on) behind the fault proxy of s3_server.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import libshard
from conftest import assert_sample_equal, pack_dir, write_eagle_dir
from s3_server import env_fixture, proxy_fixture, server_fixture

pytest.importorskip("boto3")

BUCKET = "libshard-write"
PART = 128 * 1024     # LIBSHARD_S3_PART_SIZE in these tests (moto is started to allow it)
SHARD = "512KiB"      # several parts per shard
N = 48
TESTS = Path(__file__).resolve().parent

# Writes N deterministic samples to argv[1]; the samples already in a resumed output are skipped.
WRITER = textwrap.dedent(f"""
    import sys, torch
    sys.path.insert(0, {str(TESTS)!r})
    import libshard
    from conftest import make_eagle_sample
    out, n = sys.argv[1], int(sys.argv[2])
    g = torch.Generator().manual_seed(11)
    with libshard.Writer(out, shard_size={SHARD!r}, fsync=False, journal_every="64KiB") as w:
        for i in range(n):
            s = make_eagle_sample(g, 20 + (i * 7) % 40, hidden=256)
            if not w.has(f"s{{i:04d}}"):
                w.write(s, key=f"s{{i:04d}}")
""")


server = server_fixture(bucket=BUCKET)
proxy = proxy_fixture()
env = env_fixture(LIBSHARD_S3_PART_SIZE=PART, LIBSHARD_S3_UPLOAD_THREADS=4,
                  LIBSHARD_S3_STAGING=lambda tmp: tmp / "staging",
                  LIBSHARD_CACHE_DIR=lambda tmp: tmp / "cache")


@pytest.fixture(scope="module")
def local_written(tmp_path_factory) -> Path:
    """The reference: the same samples written by the same script to a local directory."""
    out = tmp_path_factory.mktemp("s3w_local") / "ds"
    subprocess.run([sys.executable, "-c", WRITER, str(out), str(N)], check=True, timeout=300)
    return out


def write(url: str, env, n: int = N, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRITER, url, str(n)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_same_dataset(url: str, local: Path, cache: Path) -> None:
    want = libshard.open(local)
    got = libshard.open(url, cache=cache)
    assert len(got) == len(want) == N
    for i in range(len(want)):
        assert_sample_equal(got[i], want[i], f"sample {i}")


def objects(server, prefix: str) -> dict:
    # (No Prefix= : moto's signature check refuses a '/' in a query value.)
    out = server.s3().list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {o["Key"][len(prefix) + 1:]: o["Size"] for o in out
            if o["Key"].startswith(prefix + "/")}


def test_writer_round_trip(server, proxy, env, local_written, tmp_path):
    url = f"s3://{BUCKET}/written"
    r = write(url, env)
    assert r.returncode == 0, r.stderr
    assert_same_dataset(url, local_written, tmp_path / "cache")
    # The objects are the local dataset's files, of the same sizes; nothing else is left.
    local = {p.name: p.stat().st_size for p in local_written.iterdir()
             if p.suffix in (".lss", ".lsi") or p.name == "manifest.json"}
    up = objects(server, "written")
    assert {k: v for k, v in up.items() if k != "manifest.json"} == \
        {k: v for k, v in local.items() if k != "manifest.json"}
    assert "manifest.json" in up
    # Shards went up in parts, in parallel, each with its Content-MD5; the manifest came last.
    parts = proxy.part_puts()
    assert len(parts) > len(up), "no multipart upload"
    puts = [(m, p) for m, p, _ in proxy.requests if m in ("PUT", "POST")]
    assert puts[-1][1].endswith("/written/manifest.json")
    assert not (tmp_path / "staging" / BUCKET / "written").exists(), "staging left behind"
    assert server.s3().list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_existing_dataset_is_not_replaced(server, proxy, env, local_written, tmp_path):
    url = f"s3://{BUCKET}/twice"
    assert write(url, env).returncode == 0
    r = write(url, env)
    assert r.returncode != 0
    assert "already holds a dataset" in r.stderr and url in r.stderr
    assert_same_dataset(url, local_written, tmp_path / "cache")  # the old one, untouched


def test_killed_writer_resumes_without_reuploading(server, proxy, env, local_written, tmp_path):
    url = f"s3://{BUCKET}/killed"
    # Eight PUTs pass (whole shards' parts), then one is held: the writer is killed meanwhile.
    e = dict(env, LIBSHARD_S3_STALL_SECONDS="120", LIBSHARD_S3_UPLOAD_THREADS="2")
    proxy.inject_upload(*["pass"] * 8, "hold:60")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, url, str(N)], env=e)
    try:
        assert proxy.stalling.wait(timeout=240), "no upload was held"
        # A reader meanwhile sees no dataset (the manifest goes up last), never a part of one.
        with pytest.raises(FileNotFoundError, match="no manifest.json"):
            libshard.open(url, cache=tmp_path / "cache")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    done_before = proxy.completed_parts()
    assert done_before, "no part was up before the kill"
    assert "manifest.json" not in objects(server, "killed")
    proxy.reset_counts()
    r = write(url, env)
    assert r.returncode == 0, r.stderr
    again = set(proxy.part_puts())
    assert not (again & done_before), f"parts uploaded twice: {sorted(again & done_before)}"
    assert_same_dataset(url, local_written, tmp_path / "cache")
    assert server.s3().list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_upload_faults_are_retried(server, proxy, env, local_written, tmp_path):
    url = f"s3://{BUCKET}/faults"
    proxy.inject_upload("pass", "503", "reset", "pass", "503", "503", "reset")
    r = write(url, env)
    assert r.returncode == 0, r.stderr
    assert proxy.injected == {"put-503": 3, "put-reset": 2}
    assert_same_dataset(url, local_written, tmp_path / "cache")


def test_bad_credentials_name_the_url(server, proxy, env, tmp_path, monkeypatch):
    import torch
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    url = f"s3://{BUCKET}/denied"
    with pytest.raises(PermissionError) as e:
        with libshard.Writer(url) as w:
            w.write({"x": torch.zeros(4)}, key="a")
    msg = str(e.value)
    assert "HTTP 403" in msg and f"{proxy.endpoint}/{BUCKET}/denied/manifest.json" in msg
    assert "credentials from" in msg


def test_pack_and_merge_to_s3(server, proxy, env, tmp_path):
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("the libshard command is not built")
    src = tmp_path / "src"
    write_eagle_dir(src, 30, seed=4, min_len=8, max_len=60)
    local = pack_dir(src, tmp_path / "local", shard_size="96KiB")
    url = f"s3://{BUCKET}/packed"
    r = subprocess.run([cli, "pack", str(src), "-o", url, "--shard-size", "96KiB"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    want = libshard.open(local)
    got = libshard.open(url, cache=tmp_path / "cache")
    assert len(got) == len(want) == 30
    for i in range(len(want)):
        assert_sample_equal(got[i], want[i], f"sample {i}")
    # merge of two local parts to s3://
    a = pack_dir(src, tmp_path / "a", shard_size="96KiB", part="0/2")
    b = pack_dir(src, tmp_path / "b", shard_size="96KiB", part="1/2")
    murl = f"s3://{BUCKET}/merged"
    m = subprocess.run([cli, "merge", murl, str(a), str(b)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert m.returncode == 0, m.stdout + m.stderr
    merged = libshard.open(murl, cache=tmp_path / "cache")
    assert len(merged) == 30
    parts = [libshard.open(a), libshard.open(b)]
    flat = [p[i] for p in parts for i in range(len(p))]
    for i, s in enumerate(flat):
        assert_sample_equal(merged[i], s, f"merged sample {i}")
    # A second merge to the same URL is refused; the merged dataset stays.
    again = subprocess.run([cli, "merge", murl, str(a), str(b)], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "already holds a dataset" in again.stderr


def test_several_ranks_to_s3_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(libshard.UnsupportedError, match="several ranks"):
        libshard.Writer(f"s3://{BUCKET}/ranks", rank=0, world_size=2)
    assert not (tmp_path / "s3:").exists()


def test_failed_commit_upload_is_finished_by_a_resume(server, proxy, env, local_written,
                                                      tmp_path):
    """The manifest PUT fails (every try): the dataset is complete in the staging directory
    and invisible at the URL; the next Writer on the URL uploads what is missing, manifest last,
    and sends no shard part again."""
    url = f"s3://{BUCKET}/commitfail"
    e = dict(env, LIBSHARD_S3_MAX_ATTEMPTS="2")
    proxy.inject_put_path("/commitfail/manifest.json", "503", "503")
    r = write(url, e)
    assert r.returncode != 0
    assert "not uploaded; resume the write" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    assert "manifest.json" not in objects(server, "commitfail")
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        libshard.open(url, cache=tmp_path / "cache")
    parts_before = set(proxy.part_puts())
    assert parts_before
    proxy.reset_counts()
    r = write(url, env)
    assert r.returncode == 0, r.stderr
    assert not (set(proxy.part_puts()) & parts_before)
    assert_same_dataset(url, local_written, tmp_path / "cache")


def test_leftover_upload_is_aborted_at_commit(server, proxy, env, local_written, tmp_path):
    """An upload started by a run killed before it journaled the upload id (no parts) is
    aborted once the dataset is committed."""
    s3 = server.s3()
    s3.create_multipart_upload(Bucket=BUCKET, Key="orphan/shard-00000.lss")
    libshard.merge(f"s3://{BUCKET}/orphan", [local_written])
    left = [u["Key"] for u in s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])]
    assert "orphan/shard-00000.lss" not in left
    assert_same_dataset(f"s3://{BUCKET}/orphan", local_written, tmp_path / "cache")


def test_damaged_part_bodies_are_sent_again(server, proxy, env, local_written, tmp_path):
    """A network that damages upload bodies (moto stores them as they arrive): each reply's ETag
    is compared with the MD5 of what was sent, and a damaged part is sent again."""
    url = f"s3://{BUCKET}/damaged"
    proxy.inject_upload("pass", "damage", "pass", "pass", "damage", "damage")
    r = write(url, env)
    assert r.returncode == 0, r.stderr
    assert proxy.injected == {"put-damage": 3}
    puts = proxy.part_puts()
    assert len(puts) - len(set(puts)) >= 3, "no damaged part was sent again"
    assert_same_dataset(url, local_written, tmp_path / "cache")
    assert not (tmp_path / "staging" / BUCKET / "damaged").exists()


def test_pack_through_a_damaging_network(server, proxy, env, tmp_path):
    """`pack -o s3://` through a network that damages part bodies: every part is checked, the
    damaged ones sent again, and what readers get is what was packed."""
    from conftest import _cli
    cli = _cli()
    if cli is None:
        pytest.skip("the libshard command is not built")
    src = tmp_path / "src"
    write_eagle_dir(src, 30, seed=5, min_len=8, max_len=60)
    local = pack_dir(src, tmp_path / "local", shard_size="96KiB")
    url = f"s3://{BUCKET}/packed-damaged"
    proxy.inject_upload(*(["damage", "pass"] * 2))  # each damaged PUT's retry passes
    r = subprocess.run([cli, "pack", str(src), "-o", url, "--shard-size", "96KiB"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert proxy.injected == {"put-damage": 2}
    want, got = libshard.open(local), libshard.open(url, cache=tmp_path / "cache")
    assert len(got) == len(want) == 30
    for i in range(len(want)):
        assert_sample_equal(got[i], want[i], f"sample {i}")


def test_damage_in_every_attempt_fails_and_keeps_the_staging_copy(server, proxy, env, tmp_path):
    """Damage on every try of one object: the write fails naming it, nothing is published at the
    URL, and the staging directory keeps what the same command needs to finish."""
    url = f"s3://{BUCKET}/always-damaged"
    e = dict(env, LIBSHARD_S3_MAX_ATTEMPTS="3")
    proxy.inject_put_path("/always-damaged/shard-00000.lss", *["damage"] * 60)
    r = write(url, e)
    assert r.returncode != 0
    assert "the server stored other bytes than were sent, in all 3 attempts" in r.stderr, r.stderr
    assert "shard-00000.lss" in r.stderr and "not the MD5" in r.stderr
    assert "manifest.json" not in objects(server, "always-damaged")
    staging = tmp_path / "staging" / BUCKET / "always-damaged"
    # Kept for the same command to finish: the write in progress with its journal when the failed
    # upload stopped it while it was writing, or the dataset committed there when the failure came
    # with the last uploads (which of the two depends on the timing).
    kept = sorted(p.name for p in staging.iterdir())
    assert "_journal.lsj" in kept or {"manifest.json", "index.lsi"} <= set(kept), kept
    assert any(name.startswith("shard-00000.lss") for name in kept), kept


def test_object_changed_in_the_bucket_is_sent_again_by_a_resumed_merge(server, proxy, env,
                                                                      local_written, tmp_path):
    """The commit fails; meanwhile a shard object changes in the bucket (same size, other bytes).
    Running the merge again finds the object's ETag is not the one uploaded, sends the staging
    copy again, and commits only once every object was checked."""
    url = f"s3://{BUCKET}/changed"
    e = dict(env, LIBSHARD_S3_MAX_ATTEMPTS="2")
    proxy.inject_put_path("/changed/manifest.json", "503", "503")
    m = subprocess.run([sys.executable, "-c", "import sys, libshard; "
                        "libshard.merge(sys.argv[1], [sys.argv[2]])", url, str(local_written)],
                       env=e, capture_output=True, text=True, timeout=300)
    assert m.returncode != 0 and "run the same merge again" in m.stderr, m.stderr
    s3 = server.s3()
    key = "changed/shard-00000.lss"
    size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"Z" * size)
    libshard.merge(url, [local_written])
    assert_same_dataset(url, local_written, tmp_path / "cache")


def test_object_changed_after_its_staging_copy_was_freed_is_an_error(server, proxy, env,
                                                                     local_written, tmp_path):
    """A Writer frees each shard's staging bytes once it is up; if the bucket's copy then changes
    before the commit, a resume cannot send it again and says so (never uploads the freed
    holes)."""
    url = f"s3://{BUCKET}/freed"
    e = dict(env, LIBSHARD_S3_MAX_ATTEMPTS="2")
    proxy.inject_put_path("/freed/manifest.json", "503", "503")
    assert write(url, e).returncode != 0
    s3 = server.s3()
    key = "freed/shard-00000.lss"
    size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"Z" * size)
    r = write(url, env)
    assert r.returncode != 0
    assert "shard-00000.lss" in r.stderr and "was freed once it was up" in r.stderr, r.stderr
    assert "manifest.json" not in objects(server, "freed")


@pytest.mark.parametrize("url", [f"s3://{BUCKET}/../other", f"s3://{BUCKET}/a/./b",
                                 f"s3://{BUCKET}/a//b"])
def test_dot_and_empty_segments_are_refused(url, tmp_path, monkeypatch):
    import torch
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path segment") as e:
        libshard.Writer(url).write({"x": torch.zeros(4)}, key="a")
    assert url in str(e.value)
    with pytest.raises(ValueError, match="path segment"):
        libshard.open(url)
    assert not (tmp_path / "s3:").exists()
