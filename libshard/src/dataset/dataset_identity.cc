// Dataset::identity() (libshard/identity.h): the identity an open dataset records, built from its
// provenance and schema. Kept out of format/identity.cc so the parsers' library (fuzz/) does not
// need the Dataset class.

#include "libshard/dataset.h"
#include "libshard/identity.h"

namespace libshard {

DatasetIdentity Dataset::identity() const {
  DatasetIdentity id;
  id.attributes = provenance().attributes;
  id.schema = schema();
  id.digest = IdentityDigest(id.schema, id.attributes);
  id.recorded = provenance().identity_recorded;
  return id;
}

}  // namespace libshard
