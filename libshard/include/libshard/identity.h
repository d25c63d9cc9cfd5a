// Dataset identity: what made a dataset, as one value that every write that adds to it is checked
// against (docs/FORMAT.md §2.2 `provenance.identity`; the checks: docs/guide/writing.md,
// "Identity").
//
// The identity is the dataset's attributes (attributes.h: what its generator, `libshard pack`,
// capture or a trainer module declared, e.g. target_model, hidden_state_layer_ids, hidden_size,
// tokenizer, seed, data_source; for a peer cache, pack's "<format>.<key>" from the cache's own
// manifest) together with its schema (field names, dtypes, ranks, sequence dims, the length
// field: what the data's shape implies). One concept, not two: the attributes are its declared
// part, the schema its implied part, and its digest is XXH3-64 of one canonical encoding of both
// (CanonicalIdentity). Writers of this revision record the digest in the manifest; a dataset
// written before records none and has an identity that is "not recorded" (its writes were not
// checked), which is still computed from its attributes and schema.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libshard/attributes.h"
#include "libshard/schema.h"
#include "libshard/status.h"

namespace libshard {

// The version of the canonical encoding (FORMAT.md §2.2): `provenance.identity.version`.
inline constexpr uint32_t kIdentityVersion = 1;

// The canonical bytes of an identity (FORMAT.md §2.2): "LSID", u32 kIdentityVersion; the schema
// (u32 field count; per field its name, dtype name, u32 rank, i32 seq_dim; i32 length field
// index or -1); the attributes in key order (u32 count; per attribute its key, u8 0 and an i64 for
// an integer, u8 1 and the string for a string); each string as u32 byte count and bytes; all
// little-endian.
std::string CanonicalIdentity(const Schema& schema, const Attributes& attributes);
// XXH3-64 (seed 0) of CanonicalIdentity.
uint64_t IdentityDigest(const Schema& schema, const Attributes& attributes);
// The digest as 16 lower-case hex digits (what the manifest records and a loader's state carries).
std::string IdentityDigestText(uint64_t digest);

struct DatasetIdentity {
  Attributes attributes;  // declared: the manifest's provenance.attributes
  Schema schema;          // implied: the manifest's schema
  uint64_t digest = 0;    // IdentityDigest(schema, attributes)
  // The manifest records this digest (`provenance.identity`, checked at open): written by a
  // libshard that checks identities. False for a dataset written before: its identity is
  // "not recorded" (unknown in the sense that its writes were not checked against it).
  bool recorded = false;

  std::string digest_text() const { return IdentityDigestText(digest); }  // 16 hex digits
};

// The identity of what the local directory `dir` holds: a dataset (its manifest, as
// Dataset::identity() reads it, without opening the index), or an unfinished write (its journal
// header's schema and the attributes of its `_identity.json`, FORMAT.md §6; `recorded` false for a
// journal without one), whose identity is the one its commit will record, so a follower of the
// write (FORMAT.md §6.1) knows it before the manifest exists. NotFound when `dir` holds neither;
// Corruption for a damaged manifest, journal header or identity file.
Result<DatasetIdentity> ReadIdentity(const std::string& dir);

// One difference between an identity recorded and the one a write declares, for messages.
struct IdentityDifference {
  std::string field;     // an attribute key, or "schema"
  std::string recorded;  // its value as recorded ("(none)" when not recorded)
  std::string given;     // its value as given ("(none)" when not given)
};

// The differences between the attributes a dataset (or an unfinished write) records and those a
// write that continues it declares: every key of `given` whose value differs from the recorded
// one or that is not recorded. A key recorded and not given is no difference (the write keeps
// it). In key order.
std::vector<IdentityDifference> AttributeDifferences(const Attributes& recorded,
                                                     const Attributes& given);
// Every difference between two identities (attributes both ways, then the schema), e.g. two
// parts of a merge. Empty when the identities are equal.
std::vector<IdentityDifference> IdentityDifferences(const Schema& a_schema, const Attributes& a,
                                                    const Schema& b_schema, const Attributes& b);
// "target_model is 'B' here and 'A' there" lists, for messages: "KEY: A -> B; KEY2: ..." with
// strings quoted and integers bare; at most `max` differences, then "and N more".
std::string DescribeDifferences(const std::vector<IdentityDifference>& differences,
                                size_t max = 4);
// An attribute value as messages show it: a string quoted ('x'), an integer bare.
std::string QuotedAttribute(const AttributeValue& value);

// The attributes `a` and `b` share (same key, same value): what a merge of datasets of different
// identities records when told to combine them (MergeOptions::allow_identity_change).
Attributes SharedAttributes(const Attributes& a, const Attributes& b);

}  // namespace libshard
