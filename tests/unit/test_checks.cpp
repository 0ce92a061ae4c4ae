// The check helpers report what failed, where, the decoded library error and a hint.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <hdf5.h>

#include "base/check_sys.hpp"
#include "base/error.hpp"
#include "io/check_hdf5.hpp"

namespace so = superoffload;

namespace {

template <class F>
so::Error error_from(F&& f) {
  try {
    f();
  } catch (const so::Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected superoffload::Error";
  return so::Error("none");
}

TEST(Checks, CheckReportsMessageLocationAndHint) {
  const int ranks = 3;
  auto e = error_from([&] { SO_CHECK(ranks % 2 == 0, "odd rank count " << ranks << so::hint("use an even count")); });
  EXPECT_STREQ(e.what(), "odd rank count 3");
  EXPECT_EQ(e.hint(), "use an even count");
  EXPECT_NE(e.where().find("test_checks.cpp:"), std::string::npos) << e.where();
  EXPECT_NE(e.describe().find("HINT: use an even count"), std::string::npos);
}

TEST(Checks, SystemCallErrnoIsDecodedWithAHint) {
  auto e = error_from([] { SO_CHECK_SYS(::open("/nonexistent/so_file", O_RDONLY), "opening /nonexistent/so_file"); });
  EXPECT_NE(std::string(e.what()).find("opening /nonexistent/so_file: ::open("), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("No such file or directory (errno 2)"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("check the path"), std::string::npos);
}

TEST(Checks, Hdf5ErrorStackIsReported) {
  so::detail::configure_hdf5();
  auto e = error_from([] {
    SO_CHECK_HDF5(H5Fopen("/nonexistent/x.h5", H5F_ACC_RDONLY, H5P_DEFAULT), "opening /nonexistent/x.h5");
  });
  const std::string what = e.what();
  EXPECT_NE(what.find("opening /nonexistent/x.h5: HDF5 call H5Fopen"), std::string::npos) << what;
  EXPECT_NE(what.find("unable to open file"), std::string::npos) << what;
  EXPECT_NE(e.hint().find("HDF5_USE_FILE_LOCKING"), std::string::npos);
}

}  // namespace
