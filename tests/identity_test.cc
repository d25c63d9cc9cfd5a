// Dataset identity (libshard/identity.h, FORMAT.md §2.2): its canonical encoding, the manifest's
// record of it, and the checks of every write that continues or combines datasets: Resume,
// OpenForAppend, merge, the join of parts, BeginPart; what a changed run sets aside.
#include "libshard/identity.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "format_test_helpers.h"
#include "libshard/checksum.h"
#include "libshard/dataset.h"
#include "libshard/dataset_lock.h"
#include "libshard/merge.h"
#include "libshard/writer.h"
#include "testutil/testutil.h"

namespace libshard::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kGoldenDir = LIBSHARD_TEST_DATA_DIR;

std::shared_ptr<Dataset> OpenOrDie(const fs::path& dir) {
  auto ds = Dataset::Open(dir.string());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  return ds.ok() ? *ds : nullptr;
}

WriterOptions WithAttrs(Attributes a) {
  WriterOptions o = FastOptions();
  o.attributes = std::move(a);
  return o;
}

// Writes samples [first, first + n) and stops without Finish: an unfinished write (journal).
void WriteUnfinished(const fs::path& dir, uint64_t n, const WriterOptions& o, uint64_t first = 0) {
  auto w = Writer::Create(dir.string(), EagleSchema(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = first; i < first + n; ++i) {
    OwnedSample s = StandardSample(i);
    ASSERT_TRUE((*w)->Append(s.input).ok());
  }
  ASSERT_TRUE((*w)->Checkpoint().ok());
}

// The entries of `dir` whose names start with `prefix`.
std::vector<std::string> Named(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  for (int k = 0; k < 4; ++k) s[k] = static_cast<char>(v >> (8 * k));
  return s;
}

// ---- the identity and its encoding ---------------------------------------------------------

TEST(IdentityTest, CanonicalEncodingIsFormatSection22) {
  Schema schema;
  schema.fields = {{"ids", DType::kInt64, 1, 0}, {"hs", DType::kBFloat16, 3, 1}};
  schema.length_field = 0;
  const Attributes attrs = {{"seed", int64_t{-2}}, {"model", std::string("m")}};
  // Written from FORMAT.md §2.2 by hand: "LSID", version, fields, length field, attributes in
  // byte order of their keys ("model" before "seed").
  std::string want = "LSID" + Le32(1) + Le32(2);
  want += Le32(3) + "ids" + Le32(5) + "int64" + Le32(1) + Le32(0);
  want += Le32(2) + "hs" + Le32(8) + "bfloat16" + Le32(3) + Le32(1);
  want += Le32(0) + Le32(2);
  want += Le32(5) + "model" + std::string(1, '\1') + Le32(1) + "m";
  want += Le32(4) + "seed" + std::string(1, '\0');
  want += std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8);  // -2
  EXPECT_EQ(CanonicalIdentity(schema, attrs), want);
  EXPECT_EQ(IdentityDigest(schema, attrs), Xxh3(want.data(), want.size()));
  EXPECT_EQ(IdentityDigestText(0xabcULL), "0000000000000abc");
  // Every part counts: a value's type, a key, the schema.
  EXPECT_NE(IdentityDigest(schema, {{"seed", int64_t{5}}}),
            IdentityDigest(schema, {{"seed", std::string("5")}}));
  EXPECT_NE(IdentityDigest(schema, {}), IdentityDigest(schema, {{"seed", int64_t{5}}}));
  Schema other = schema;
  other.fields[1].dtype = DType::kFloat16;
  EXPECT_NE(IdentityDigest(schema, attrs), IdentityDigest(other, attrs));
  other = schema;
  other.length_field = -1;
  EXPECT_NE(IdentityDigest(schema, attrs), IdentityDigest(other, attrs));
}

TEST(IdentityTest, DifferencesNameTheKeyAndBothValues) {
  const Attributes recorded = {{"target_model", std::string("A")}, {"hidden_size", int64_t{8}}};
  EXPECT_TRUE(AttributeDifferences(recorded, {{"target_model", std::string("A")}}).empty());
  EXPECT_TRUE(AttributeDifferences(recorded, {}).empty());  // not given: kept
  auto d = AttributeDifferences(recorded, {{"target_model", std::string("B")},
                                           {"seed", int64_t{3}}});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].field, "seed");
  EXPECT_EQ(d[0].recorded, "(none)");
  EXPECT_EQ(d[0].given, "3");
  EXPECT_EQ(d[1].field, "target_model");
  EXPECT_EQ(d[1].recorded, "'A'");
  EXPECT_EQ(d[1].given, "'B'");
  EXPECT_EQ(DescribeDifferences(d), "seed: (none) -> 3; target_model: 'A' -> 'B'");
  EXPECT_EQ(SharedAttributes(recorded, {{"target_model", std::string("A")},
                                        {"hidden_size", int64_t{9}}}),
            (Attributes{{"target_model", std::string("A")}}));
}

// Attributes are JSON strings in the manifest and bytes in the digest: bytes JSON cannot hold
// would be replaced in one and not the other, so they are refused before anything is written.
TEST(IdentityTest, AttributesMustBeUtf8) {
  TempDir dir;
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(),
                             WithAttrs({{"model", std::string("\xff\xfe")}}))
                  .status(),
              StatusCode::kInvalidArgument, {"attribute 'model' is not valid UTF-8"});
  ExpectError(Writer::Create(dir.path().string(), EagleSchema(),
                             WithAttrs({{"\xc3", std::string("x")}}))
                  .status(),
              StatusCode::kInvalidArgument, {"is not valid UTF-8"});
  WriteStandard(dir.path(), 1, WithAttrs({{"model", std::string("caf\xc3\xa9")}}));
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_TRUE(ds->identity().recorded);
}

// ---- the manifest's record --------------------------------------------------------------------

TEST(IdentityTest, WrittenDatasetsRecordTheirIdentity) {
  TempDir dir;
  const Attributes attrs = {{"target_model", std::string("llama")}, {"hidden_size", int64_t{24}}};
  WriteStandard(dir.path(), 3, WithAttrs(attrs));
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  const DatasetIdentity id = ds->identity();
  EXPECT_TRUE(id.recorded);
  EXPECT_EQ(id.attributes, attrs);
  EXPECT_EQ(id.schema, EagleSchema());
  EXPECT_EQ(id.digest, IdentityDigest(EagleSchema(), attrs));
  const auto m = nlohmann::json::parse(ReadFileToString(dir / "manifest.json"));
  EXPECT_EQ(m["provenance"]["identity"]["version"], 1);
  EXPECT_EQ(m["provenance"]["identity"]["xxh3"], id.digest_text());
  // No attributes: the identity is the schema's, still recorded.
  TempDir plain;
  WriteStandard(plain.path(), 1, FastOptions());
  auto p = OpenOrDie(plain.path());
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->identity().recorded);
  EXPECT_EQ(p->identity().digest, IdentityDigest(EagleSchema(), {}));
}

TEST(IdentityTest, GoldenDatasetsBeforeIdentitiesOpenWithoutOne) {
  for (const char* name : {"golden_v1", "golden_v1_zstd", "golden_v2", "golden_v2_codecs",
                           "golden_v3_codecs", "golden_by_hand", "golden_by_hand_v2"}) {
    SCOPED_TRACE(name);
    auto ds = OpenOrDie(kGoldenDir / name);
    ASSERT_TRUE(ds);
    EXPECT_FALSE(ds->identity().recorded);
    // Still computed from what the manifest records.
    EXPECT_EQ(ds->identity().digest, IdentityDigest(ds->schema(), ds->provenance().attributes));
  }
  for (const char* name :
       {"golden_v3", "golden_v3_zstd", "golden_v3_planes2", "golden_v3_append"}) {
    SCOPED_TRACE(name);
    auto ds = OpenOrDie(kGoldenDir / name);
    ASSERT_TRUE(ds);
    EXPECT_TRUE(ds->identity().recorded);
  }
}

// golden_by_hand_v3's identity was computed from FORMAT.md §2.2 alone
// (tests/data/make_golden_v2_by_hand.py, Python's struct and xxhash): the reader checks it at
// open, and reports the same digest.
TEST(IdentityTest, HandWrittenIdentityAgreesWithTheSpec) {
  const auto want =
      nlohmann::json::parse(ReadFileToString(kGoldenDir / "golden_by_hand_v3" / "expected.json"));
  auto ds = OpenOrDie(kGoldenDir / "golden_by_hand_v3");
  ASSERT_TRUE(ds);
  EXPECT_TRUE(ds->identity().recorded);
  EXPECT_EQ(ds->identity().digest_text(), want["identity"].get<std::string>());
  EXPECT_EQ(ds->provenance().attributes,
            (Attributes{{"target_model", std::string("by/hand")}, {"hidden_size", int64_t{4}},
                        {"seed", int64_t{-7}}}));
}

TEST(IdentityTest, EditedManifestIsCorruptionAndARemovedIdentityIsNotRecorded) {
  TempDir dir;
  WriteStandard(dir.path(), 2, WithAttrs({{"target_model", std::string("llama")}}));
  const fs::path mp = dir / "manifest.json";
  const auto original = nlohmann::json::parse(ReadFileToString(mp));
  // An attribute changed by hand: the recorded digest no longer matches.
  auto edited = original;
  edited["provenance"]["attributes"]["target_model"] = "qwen";
  WriteStringToFile(mp, edited.dump(2));
  ExpectError(Dataset::Open(dir.path().string()).status(), StatusCode::kCorruption,
              {"provenance.identity.xxh3", "edited or damaged"});
  // A damaged digest.
  edited = original;
  edited["provenance"]["identity"]["xxh3"] = "XYZ";
  WriteStringToFile(mp, edited.dump(2));
  ExpectError(Dataset::Open(dir.path().string()).status(), StatusCode::kCorruption,
              {"provenance.identity.xxh3 is not 16 lower-case hex digits"});
  edited["provenance"]["identity"] = "0123456789abcdef";
  WriteStringToFile(mp, edited.dump(2));
  ExpectError(Dataset::Open(dir.path().string()).status(), StatusCode::kCorruption,
              {"provenance.identity is not an object"});
  // Removed: opens, identity not recorded.
  edited = original;
  edited["provenance"].erase("identity");
  WriteStringToFile(mp, edited.dump(2));
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_FALSE(ds->identity().recorded);
  // A later version of the encoding: not checked, not recorded (a newer writer's).
  edited = original;
  edited["provenance"]["identity"]["version"] = 2;
  edited["provenance"]["identity"]["xxh3"] = "0000000000000000";
  WriteStringToFile(mp, edited.dump(2));
  ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_FALSE(ds->identity().recorded);
}

// ---- Resume --------------------------------------------------------------------------------

TEST(IdentityTest, ResumeRefusesAnotherIdentityNamingKeyAndValues) {
  TempDir dir;
  WriteUnfinished(dir.path(), 3, WithAttrs({{"target_model", std::string("A")},
                                            {"seed", int64_t{1}}}));
  EXPECT_TRUE(fs::exists(dir / "_identity.json"));
  // A changed value, and a key the write does not record.
  ExpectError(Writer::Resume(dir.path().string(), WithAttrs({{"target_model", std::string("B")}}))
                  .status(),
              StatusCode::kInvalidArgument,
              {"unfinished write", "target_model='A'", "'B'", "allow_identity_change",
               ".stale-TIME"});
  ExpectError(Writer::Resume(dir.path().string(), WithAttrs({{"tokenizer", std::string("t")}}))
                  .status(),
              StatusCode::kInvalidArgument, {"records no attribute 'tokenizer'", "tokenizer='t'"});
  // Nothing was touched by the refusals: the same attributes (or fewer) continue it.
  auto w = Writer::Resume(dir.path().string(), WithAttrs({{"seed", int64_t{1}}}));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->existing_sources().size(), 3u);
  EXPECT_TRUE((*w)->set_aside().empty());
  OwnedSample s = StandardSample(3);
  ASSERT_TRUE((*w)->Append(s.input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_FALSE(fs::exists(dir / "_identity.json"));  // the manifest records it now
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 4u);
  EXPECT_EQ(ds->provenance().attributes,
            (Attributes{{"target_model", std::string("A")}, {"seed", int64_t{1}}}));
  // Committed: resuming is appending, checked against the manifest.
  ExpectError(Writer::Resume(dir.path().string(), WithAttrs({{"seed", int64_t{2}}})).status(),
              StatusCode::kInvalidArgument, {"a dataset made with seed=1", "gives 2"});
}

TEST(IdentityTest, ResumeWithAllowSetsTheOldWriteAsideAndStartsAfresh) {
  TempDir root;
  const fs::path dir = root / "out";
  WriteUnfinished(dir, 3, WithAttrs({{"target_model", std::string("A")}}));
  const std::vector<std::string> before = Named(dir, "");
  WriterOptions o = WithAttrs({{"target_model", std::string("B")}});
  o.allow_identity_change = true;
  auto w = Writer::Resume(dir.string(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ((*w)->set_aside().size(), 1u);
  const fs::path aside = (*w)->set_aside()[0];
  EXPECT_EQ(aside.parent_path(), root.path());
  EXPECT_TRUE(aside.filename().string().starts_with("out.stale-")) << aside;
  // Everything the old write had is there, names kept (the lock file stays with `out`).
  for (const std::string& name : before)
    if (name != DatasetLock::kFileName) EXPECT_TRUE(fs::exists(aside / name)) << name;
  EXPECT_TRUE(fs::exists(aside / "_journal.lsj"));
  EXPECT_TRUE(fs::exists(aside / "shard-00000.lss.tmp"));
  // The new write starts from nothing, with the new identity, and never sees the old samples.
  EXPECT_TRUE((*w)->existing_sources().empty());
  OwnedSample s = StandardSample(7);
  ASSERT_TRUE((*w)->Append(s.input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto ds = OpenOrDie(dir);
  ASSERT_TRUE(ds);
  ASSERT_EQ(ds->size(), 1u);
  EXPECT_EQ(ds->key(0).value(), "dump/data_7.pt");
  EXPECT_EQ(ds->provenance().attributes, (Attributes{{"target_model", std::string("B")}}));
  // The set-aside write is still an unfinished write of its own: resumable where it is.
  auto old = Writer::Resume(aside.string(), WithAttrs({{"target_model", std::string("A")}}));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)->existing_sources().size(), 3u);
}

// ReadIdentity: a write's identity before its commit is the one its manifest then records (what a
// follower of the write can know early), and a dataset's is Dataset::identity()'s.
TEST(IdentityTest, ReadIdentityOfAWriteInProgressIsTheCommittedOne) {
  TempDir dir, empty;
  const Attributes attrs = {{"target_model", std::string("A")}, {"seed", int64_t{3}}};
  WriteUnfinished(dir.path(), 2, WithAttrs(attrs));
  auto during = ReadIdentity(dir.path().string());
  ASSERT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_TRUE(during->recorded);
  EXPECT_EQ(during->attributes, attrs);
  EXPECT_EQ(during->schema, EagleSchema());
  {
    auto w = Writer::Resume(dir.path().string(), FastOptions());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto ds = OpenOrDie(dir.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->identity().digest, during->digest);
  auto after = ReadIdentity(dir.path().string());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->digest, during->digest);
  EXPECT_TRUE(after->recorded);
  ExpectError(ReadIdentity(empty.path().string()).status(), StatusCode::kNotFound,
              {"no identity"});
  // A journal of a libshard before identities: not recorded.
  WriteUnfinished(empty.path(), 1, FastOptions());
  fs::remove(empty / "_identity.json");
  auto old = ReadIdentity(empty.path().string());
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->recorded);
  EXPECT_EQ(old->digest, IdentityDigest(EagleSchema(), {}));
}

// A journal left by a libshard before identities has no _identity.json: its identity is not
// recorded, so the given attributes are taken (and recorded from then on).
TEST(IdentityTest, ResumeOfAJournalWithoutIdentityTakesTheGivenOne) {
  TempDir dir;
  WriteUnfinished(dir.path(), 2, FastOptions());
  fs::remove(dir / "_identity.json");
  auto w = Writer::Resume(dir.path().string(), WithAttrs({{"target_model", std::string("A")}}));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->existing_sources().size(), 2u);
  EXPECT_TRUE(fs::exists(dir / "_identity.json"));
  w->reset();
  ExpectError(Writer::Resume(dir.path().string(), WithAttrs({{"target_model", std::string("B")}}))
                  .status(),
              StatusCode::kInvalidArgument, {"target_model='A'"});
}

TEST(IdentityTest, DamagedIdentityFileIsCorruption) {
  TempDir dir;
  WriteUnfinished(dir.path(), 1, FastOptions());
  WriteStringToFile(dir / "_identity.json", "{\"version\": 1, \"attributes\": {\"k\": [1]}}");
  ExpectError(Writer::Resume(dir.path().string(), FastOptions()).status(), StatusCode::kCorruption,
              {"_identity.json", "attribute 'k'"});
  WriteStringToFile(dir / "_identity.json", std::string(100, '['));
  ExpectError(Writer::Resume(dir.path().string(), FastOptions()).status(), StatusCode::kCorruption,
              {"_identity.json"});
  WriteStringToFile(dir / "_identity.json", "{\"version\": 9, \"attributes\": {}}");
  ExpectError(Writer::Resume(dir.path().string(), FastOptions()).status(),
              StatusCode::kUnsupported, {"identity version 9"});
}

// ---- OpenForAppend -------------------------------------------------------------------------

TEST(IdentityTest, AppendRefusesNewOrChangedKeysAndSetsAsideWithAllow) {
  TempDir root;
  const fs::path dir = root / "ds";
  WriteStandard(dir, 2, WithAttrs({{"target_model", std::string("A")}}));
  ExpectError(Writer::OpenForAppend(dir.string(), WithAttrs({{"seed", int64_t{4}}})).status(),
              StatusCode::kInvalidArgument, {"records no attribute 'seed'", "seed=4",
                                             "mix two setups"});
  {
    auto w = Writer::OpenForAppend(dir.string(), WithAttrs({{"target_model", std::string("A")}}));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  WriterOptions o = WithAttrs({{"target_model", std::string("B")}});
  o.allow_identity_change = true;
  auto w = Writer::OpenForAppend(dir.string(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ((*w)->set_aside().size(), 1u);
  const fs::path aside = (*w)->set_aside()[0];
  // The set-aside dataset still opens where it went, whole.
  auto old = OpenOrDie(aside);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->size(), 2u);
  EXPECT_EQ(old->provenance().attributes, (Attributes{{"target_model", std::string("A")}}));
  EXPECT_TRUE((*w)->existing_sources().empty());
  OwnedSample s = StandardSample(5);
  ASSERT_TRUE((*w)->Append(s.input).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto ds = OpenOrDie(dir);
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 1u);
  EXPECT_EQ(ds->provenance().attributes, (Attributes{{"target_model", std::string("B")}}));
}

// ---- merge and join ---------------------------------------------------------------------------

TEST(IdentityTest, MergeRefusesOtherIdentitiesUnlessAllowedAndThenRecordsWhatTheyShare) {
  TempDir a, b, refused, merged, schema_part, refused2;
  WriteStandard(a.path(), 2, WithAttrs({{"target_model", std::string("A")},
                                        {"hidden_size", int64_t{24}}}), false, 0);
  WriteStandard(b.path(), 2, WithAttrs({{"target_model", std::string("B")},
                                        {"hidden_size", int64_t{24}}}), false, 2);
  MergeOptions cli;
  cli.caller = Caller::kCli;
  ExpectError(MergeDatasets(refused.path().string(), {a.path().string(), b.path().string()}, cli),
              StatusCode::kInvalidArgument,
              {"other attributes", "target_model: 'A' -> 'B'", "--allow-identity-change"});
  MergeOptions allow;
  allow.allow_identity_change = true;
  ASSERT_TRUE(
      MergeDatasets(merged.path().string(), {a.path().string(), b.path().string()}, allow).ok());
  auto ds = OpenOrDie(merged.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 4u);
  EXPECT_EQ(ds->provenance().attributes, (Attributes{{"hidden_size", int64_t{24}}}));
  EXPECT_TRUE(ds->identity().recorded);
  // A schema difference is named too, and never merged.
  Schema other = EagleSchema();
  other.fields[2].dtype = DType::kFloat16;
  {
    auto w = Writer::Create(schema_part.path().string(), other, FastOptions());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  ExpectError(MergeDatasets(refused2.path().string(),
                            {a.path().string(), schema_part.path().string()}, allow),
              StatusCode::kInvalidArgument, {"different schema", "schema field 2", "bfloat16",
                                             "float16"});
}

TEST(IdentityTest, JoinRefusesPartsOfOtherIdentitiesUnlessAllowed) {
  TempDir out;
  WriteStandard(PartDirectory(out.path().string(), 0, 2), 2,
                WithAttrs({{"target_model", std::string("A")}}), false, 0);
  WriteStandard(PartDirectory(out.path().string(), 1, 2), 2,
                WithAttrs({{"target_model", std::string("B")}}), false, 2);
  ExpectError(JoinParts(out.path().string(), 2).status(), StatusCode::kInvalidArgument,
              {"join of", "rank-00001-of-00002", "target_model: 'A' -> 'B'"});
  EXPECT_FALSE(fs::exists(out / "manifest.json"));
  JoinOptions allow;
  allow.allow_identity_change = true;
  auto j = JoinParts(out.path().string(), 2, allow);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_TRUE(j->joined);
  auto ds = OpenOrDie(out.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 4u);
  EXPECT_TRUE(ds->provenance().attributes.empty());
}

// ---- BeginPart: what a run of another world size left -------------------------------------

TEST(IdentityTest, BeginPartSetsAsidePartsOfAnotherWorldSize) {
  TempDir out;
  const std::string o = out.path().string();
  // A run of 3 ranks: two parts (one unfinished), one empty rank, joined once.
  WriteStandard(PartDirectory(o, 0, 3), 2, FastOptions(), false, 0);
  WriteUnfinished(PartDirectory(o, 1, 3), 1, FastOptions(), 10);
  ASSERT_TRUE(MarkPartEmpty(o, 2, 3).ok());
  WriteStringToFile(out / "parts" / ".joined-of-00003", "xxh3:0000000000000000\n");
  // A run of 2 ranks starts: everything of the 3-rank run is set aside, kept.
  auto aside = BeginPart(o, 0, 2);
  ASSERT_TRUE(aside.ok()) << aside.status().ToString();
  ASSERT_EQ(aside->size(), 3u);
  for (const std::string& p : *aside) {
    EXPECT_TRUE(fs::exists(p)) << p;
    EXPECT_NE(p.find(".stale-"), std::string::npos) << p;
  }
  const std::vector<std::string> part0 = Named(out / "parts", "rank-00000-of-00003.stale-");
  ASSERT_EQ(part0.size(), 1u);
  EXPECT_EQ(Named(out / "parts", "rank-00001-of-00003.stale-").size(), 1u);
  EXPECT_EQ(Named(out / "parts", "rank-00002-of-00003.empty.stale-").size(), 1u);
  EXPECT_FALSE(fs::exists(out / "parts" / ".joined-of-00003"));
  EXPECT_FALSE(fs::exists(PartDirectory(o, 0, 3)));
  // The complete part set aside still opens where it went.
  auto kept = OpenOrDie(out / "parts" / part0[0]);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->size(), 2u);
  // The 2-rank run writes and joins; the set-aside parts never reach the join.
  WriteStandard(PartDirectory(o, 0, 2), 1, FastOptions(), false, 20);
  ASSERT_TRUE(BeginPart(o, 1, 2).ok());
  WriteStandard(PartDirectory(o, 1, 2), 1, FastOptions(), false, 21);
  auto j = JoinParts(o, 2);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  auto ds = OpenOrDie(out.path());
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 2u);
  // Nothing of another world size is left for a follower to trip on, and a second BeginPart of
  // the same world size sets nothing aside.
  auto again = BeginPart(o, 1, 2);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
}

TEST(IdentityTest, BeginPartRefusesAPartStillBeingWritten) {
  TempDir out;
  const std::string o = out.path().string();
  WriteUnfinished(PartDirectory(o, 0, 3), 1, FastOptions());
  auto held = DatasetLock::Acquire(PartDirectory(o, 0, 3), false);
  ASSERT_TRUE(held.ok());
  ExpectError(BeginPart(o, 0, 2).status(), StatusCode::kAlreadyExists,
              {"being written by another process", "a write of 2 ranks", "of a write of 3 ranks"});
  EXPECT_TRUE(fs::exists(PartDirectory(o, 0, 3)));
}

TEST(IdentityTest, BeginPartRefusesOneWritersDatasetUnlessAllowed) {
  TempDir out;
  const std::string o = out.path().string();
  WriteStandard(out.path(), 2, FastOptions());
  ExpectError(BeginPart(o, 0, 2).status(), StatusCode::kInvalidArgument,
              {"a dataset written by one writer", "would replace it"});
  auto aside = BeginPart(o, 0, 2, /*allow_identity_change=*/true);
  ASSERT_TRUE(aside.ok()) << aside.status().ToString();
  ASSERT_EQ(aside->size(), 1u);
  auto old = OpenOrDie((*aside)[0]);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->size(), 2u);
  EXPECT_FALSE(fs::exists(out / "manifest.json"));
  EXPECT_TRUE(fs::exists(out / "parts"));  // kept: it is this write's
  // One writer's unfinished write too.
  TempDir unfinished;
  WriteUnfinished(unfinished.path(), 1, FastOptions());
  ExpectError(BeginPart(unfinished.path().string(), 1, 2).status(), StatusCode::kInvalidArgument,
              {"an unfinished write of one writer"});
  // A join of parts is this kind of write's own: no refusal.
  TempDir joined;
  WriteStandard(PartDirectory(joined.path().string(), 0, 1), 1, FastOptions());
  ASSERT_TRUE(JoinParts(joined.path().string(), 1).ok());
  auto fine = BeginPart(joined.path().string(), 0, 1);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_TRUE(fine->empty());
}

// ---- CheckWriteIdentity, as front ends call it -------------------------------------------------

TEST(IdentityTest, CheckWriteIdentityBeforeChoosingHowToOpen) {
  TempDir root;
  const fs::path dir = root / "ds";
  // Nothing there, or a missing directory: nothing to check.
  auto none = CheckWriteIdentity((root / "missing").string(), FastOptions());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  WriteUnfinished(dir, 2, WithAttrs({{"target_model", std::string("A")}}));
  auto same = CheckWriteIdentity(dir.string(), WithAttrs({{"target_model", std::string("A")}}));
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->empty());
  WriterOptions cli = WithAttrs({{"target_model", std::string("B")}});
  cli.caller = Caller::kCli;
  ExpectError(CheckWriteIdentity(dir.string(), cli).status(), StatusCode::kInvalidArgument,
              {"--allow-identity-change"});
  cli.allow_identity_change = true;
  auto moved = CheckWriteIdentity(dir.string(), cli);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  ASSERT_EQ(moved->size(), 1u);
  EXPECT_FALSE(fs::exists(dir / "_journal.lsj"));
  EXPECT_TRUE(fs::exists(fs::path((*moved)[0]) / "_journal.lsj"));
  // The directory holds nothing to continue now: a new write starts there.
  WriteStandard(dir, 1, cli);
  // A busy directory is refused, not checked.
  auto lock = DatasetLock::Acquire(dir.string(), false);
  ASSERT_TRUE(lock.ok());
  ExpectError(CheckWriteIdentity(dir.string(), FastOptions()).status(), StatusCode::kAlreadyExists,
              {"being written by another process"});
}

}  // namespace
}  // namespace libshard::testing
