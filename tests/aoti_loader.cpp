// Runs an AOTInductor package through torch's C++ loader, in a process with no Python at all.
// usage: aoti_loader PACKAGE INPUT ROWS COLS OUTPUT
// INPUT: ROWS x COLS float32 values, raw; OUTPUT: the first output's float32 values, raw.
#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s PACKAGE INPUT ROWS COLS OUTPUT\n", argv[0]);
    return 2;
  }
  const int64_t rows = std::atoll(argv[3]), cols = std::atoll(argv[4]);
  at::Tensor input = at::empty({rows, cols}, at::kFloat);
  std::ifstream in(argv[2], std::ios::binary);
  in.read(reinterpret_cast<char*>(input.data_ptr<float>()), static_cast<std::streamsize>(input.nbytes()));
  if (!in) {
    std::fprintf(stderr, "could not read %lld floats from %s\n", static_cast<long long>(rows * cols), argv[2]);
    return 2;
  }
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  at::Tensor output = loader.run({input})[0].contiguous().to(at::kFloat);
  std::ofstream out(argv[5], std::ios::binary);
  out.write(reinterpret_cast<const char*>(output.data_ptr<float>()), static_cast<std::streamsize>(output.nbytes()));
  return out ? 0 : 1;
}
