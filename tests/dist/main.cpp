// GoogleTest under mpirun: every rank runs every test (each test's collectives in the same order
// on every rank), and mpirun fails when any rank does.
#include <gtest/gtest.h>

#include "qkv/dist.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  qkv::dist::Communicator::world();  // MPI up before the first test, down at exit
  return RUN_ALL_TESTS();
}
