// A store over the S3 client (io/s3_client.h) for any server of the S3 API: the stores of the
// S3 dialect (s3:// in s3_store.cc; gs://, Cloud Storage's S3-interoperable XML API, in
// gcs_store.cc) differ only in their bucket rules and their configuration (endpoint, region,
// credentials, addressing: an io::S3Config), never in their requests.
#pragma once

#include <memory>

#include "io/s3_client.h"
#include "objstore/object_store.h"

namespace libshard::objstore {

// The store of `url` (parsed and its bucket checked by the caller) over clients made from
// `config`; a configuration that could not be read is the error of every call.
std::shared_ptr<ObjectStore> MakeS3DialectStore(ObjectUrl url, Result<io::S3Config> config);

// The configurations of the dialect's stores besides s3:// (io::LoadS3Config): gs://
// (gcs_store.cc), declared here for its tests.
Result<io::S3Config> LoadGcsConfig();

}  // namespace libshard::objstore
