// A main() for fuzz targets when libFuzzer is unavailable (GCC builds): runs each file given on
// the command line through LLVMFuzzerTestOneInput once, so corpora and crash reproducers can be
// replayed under the sanitizers.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  for (int k = 1; k < argc; ++k) {
    std::ifstream in(argv[k], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[k]);
      return 1;
    }
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::printf("replayed %d inputs\n", argc - 1);
  return 0;
}
