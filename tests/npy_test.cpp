// Tests for the .npy reader/writer and for TensorView's constructors.
//
// The "numpy" byte strings below are exactly what numpy.save writes (magic,
// version, little-endian header length, the dict, space padding to a 64-byte
// boundary and '\n'), so interoperability is checked without Python.
#include "io/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "half.h"
#include "sdpa/error.h"
#include "sdpa/tensor_view.h"

namespace {

namespace fs = std::filesystem;
using sdpa::DType;
using sdpa::Error;
using sdpa::TensorView;
using sdpa::io::encode_npy;
using sdpa::io::NpyArray;
using sdpa::io::parse_npy;
using sdpa::io::read_npy;
using sdpa::io::write_npy;
using ::testing::HasSubstr;

std::vector<std::byte> to_bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::string to_string(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A .npy file with the given header dict. With `pad`, the dict gets numpy's
// padding (spaces and '\n' up to a 64-byte boundary); without, it is used as is.
std::vector<std::byte> make_npy(int major, std::string header, std::string_view data = {}, bool pad = true) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  if (pad) {
    const std::size_t unpadded = preamble + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
  }
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return to_bytes(out);
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The message of the sdpa::Error that parsing `bytes` throws ("" and a test
// failure when it does not throw).
std::string parse_error(const std::vector<std::byte>& bytes, const std::string& name = "bad.npy") {
  try {
    parse_npy(bytes, name);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected sdpa::Error";
  return "";
}

std::string header_error(const std::string& header, std::string_view data = {}) {
  return parse_error(make_npy(1, header, data));
}

// ---------------------------------------------------------------------------
// TensorView

TEST(TensorViewTest, DtypeSizesAndNames) {
  EXPECT_EQ(sdpa::dtype_size(DType::f32), 4u);
  EXPECT_EQ(sdpa::dtype_size(DType::f64), 8u);
  EXPECT_EQ(sdpa::dtype_size(DType::f16), 2u);
  EXPECT_EQ(sdpa::dtype_size(DType::bf16), 2u);
  EXPECT_EQ(sdpa::dtype_size(DType::boolean), 1u);
  EXPECT_EQ(sdpa::dtype_size(DType::i32), 4u);
  EXPECT_EQ(sdpa::dtype_size(DType::i64), 8u);
  EXPECT_EQ(sdpa::dtype_size(DType::i8), 1u);
  EXPECT_STREQ(sdpa::dtype_name(DType::f32), "float32");
  EXPECT_STREQ(sdpa::dtype_name(DType::f64), "float64");
  EXPECT_STREQ(sdpa::dtype_name(DType::f16), "float16");
  EXPECT_STREQ(sdpa::dtype_name(DType::bf16), "bfloat16");
  EXPECT_STREQ(sdpa::dtype_name(DType::boolean), "bool");
  EXPECT_STREQ(sdpa::dtype_name(DType::i32), "int32");
  EXPECT_STREQ(sdpa::dtype_name(DType::i64), "int64");
  EXPECT_STREQ(sdpa::dtype_name(DType::i8), "int8");
}

TEST(TensorViewTest, ContiguousStridesAreRowMajorForEachRank) {
  float buf[1] = {};
  const TensorView v1 = TensorView::contiguous(buf, {7});
  EXPECT_EQ(v1.rank, 1);
  EXPECT_EQ(v1.stride[0], 1);

  const TensorView v2 = TensorView::contiguous(buf, {3, 5});
  EXPECT_EQ(v2.rank, 2);
  EXPECT_EQ(v2.stride[0], 5);
  EXPECT_EQ(v2.stride[1], 1);

  const TensorView v3 = TensorView::contiguous(buf, {2, 3, 5});
  EXPECT_EQ(v3.stride[0], 15);
  EXPECT_EQ(v3.stride[1], 5);
  EXPECT_EQ(v3.stride[2], 1);

  const TensorView v4 = TensorView::contiguous(buf, {2, 8, 128, 64});
  EXPECT_EQ(v4.rank, 4);
  EXPECT_EQ(v4.dtype, DType::f32);
  EXPECT_EQ(v4.data, static_cast<void*>(buf));
  EXPECT_EQ(v4.shape, (std::array<std::int64_t, 4>{2, 8, 128, 64}));
  EXPECT_EQ(v4.stride, (std::array<std::int64_t, 4>{8 * 128 * 64, 128 * 64, 64, 1}));
  EXPECT_EQ(v4.numel(), 2 * 8 * 128 * 64);
  EXPECT_EQ(v4.shape_string(), "[2, 8, 128, 64]");
  EXPECT_TRUE(v4.is_set());
}

TEST(TensorViewTest, ContiguousKeepsDtypeAndConstPointer) {
  const double d[6] = {};
  const TensorView v = TensorView::contiguous(d, {2, 3});
  EXPECT_EQ(v.dtype, DType::f64);
  EXPECT_EQ(v.data, static_cast<const void*>(d));
  const std::int32_t i[4] = {};
  const TensorView w = TensorView::contiguous(i, DType::i32, {4});
  EXPECT_EQ(w.dtype, DType::i32);
  EXPECT_EQ(w.numel(), 4);
}

TEST(TensorViewTest, ContiguousRejectsRankOutsideOneToFour) {
  float buf[1] = {};
  try {
    TensorView::contiguous(buf, DType::f32, {});
    FAIL() << "rank 0 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0"));
  }
  try {
    TensorView::contiguous(buf, {1, 2, 3, 4, 5});
    FAIL() << "rank 5 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 5"));
  }
}

TEST(TensorViewTest, ContiguousRejectsNegativeExtent) {
  float buf[1] = {};
  EXPECT_THROW(TensorView::contiguous(buf, {2, -1}), Error);
}

TEST(TensorViewTest, ZeroSizeExtentGivesEmptyView) {
  float buf[1] = {};
  const TensorView v = TensorView::contiguous(buf, {2, 0, 3});
  EXPECT_EQ(v.numel(), 0);
  EXPECT_EQ(v.stride[2], 1);
  EXPECT_EQ(v.stride[1], 3);
  EXPECT_EQ(v.shape_string(), "[2, 0, 3]");
}

TEST(TensorViewTest, UnsetViewHasNoElements) {
  const TensorView v;
  EXPECT_FALSE(v.is_set());
  EXPECT_EQ(v.numel(), 0);
  EXPECT_EQ(v.shape_string(), "[]");
}

TEST(TensorViewTest, BshdPresentsBnhdMemoryAsBhnd) {
  float buf[1] = {};
  const std::int64_t b = 2, n = 5, h = 3, d = 4;
  const TensorView v = TensorView::bshd(buf, b, n, h, d);
  EXPECT_EQ(v.rank, 4);
  EXPECT_EQ(v.dtype, DType::f32);
  EXPECT_EQ(v.shape, (std::array<std::int64_t, 4>{b, h, n, d}));
  EXPECT_EQ(v.stride, (std::array<std::int64_t, 4>{n * h * d, d, h * d, 1}));
  // Element [bi, hi, ni, di] lives at ((bi*N + ni)*H + hi)*d + di in [B, N, H, d] memory.
  const std::int64_t bi = 1, hi = 2, ni = 3, di = 1;
  EXPECT_EQ(bi * v.stride[0] + hi * v.stride[1] + ni * v.stride[2] + di * v.stride[3], ((bi * n + ni) * h + hi) * d + di);
  const TensorView w = TensorView::bshd(buf, DType::f16, 1, 2, 3, 4);
  EXPECT_EQ(w.dtype, DType::f16);
}

TEST(TensorViewTest, BshdRejectsNegativeExtent) {
  float buf[1] = {};
  EXPECT_THROW(TensorView::bshd(buf, 1, -2, 3, 4), Error);
}

// ---------------------------------------------------------------------------
// Round trips

template <class T>
void expect_round_trip(DType dtype, const std::vector<std::int64_t>& shape, std::initializer_list<T> values) {
  SCOPED_TRACE(std::string(sdpa::dtype_name(dtype)) + " rank " + std::to_string(shape.size()));
  // initializer_list rather than std::vector, which has no bool data().
  const std::vector<std::byte> bytes = encode_npy(dtype, shape, std::data(values));
  EXPECT_EQ(bytes.size() % 64, (values.size() * sizeof(T)) % 64) << "data must start on a 64-byte boundary";
  NpyArray a = parse_npy(bytes, "mem");
  EXPECT_EQ(a.dtype, dtype);
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.numel(), static_cast<std::int64_t>(values.size()));
  ASSERT_EQ(a.data.size(), values.size() * sizeof(T));
  if (values.size() > 0) {
    EXPECT_EQ(std::memcmp(a.as<T>(), std::data(values), a.data.size()), 0);
  }
  EXPECT_EQ(a.name, "mem");
}

TEST(NpyRoundTripTest, EveryDtype) {
  const std::vector<std::int64_t> shape{2, 3};
  expect_round_trip<float>(DType::f32, shape, {1.5f, -2.f, 0.f, 3.25f, 1e30f, -1e-30f});
  expect_round_trip<double>(DType::f64, shape, {1.5, -2., 0., 3.25, 1e300, -1e-300});
  expect_round_trip<std::uint16_t>(DType::f16, shape, {0x3c00, 0xc000, 0x0000, 0x7bff, 0x0001, 0x8000});
  expect_round_trip<bool>(DType::boolean, shape, {true, false, true, true, false, false});
  expect_round_trip<std::int32_t>(DType::i32, shape, {1, -2, 0, 2147483647, -2147483647 - 1, 7});
  expect_round_trip<std::int64_t>(DType::i64, shape, {1, -2, 0, INT64_MAX, INT64_MIN, 7});
  expect_round_trip<std::int8_t>(DType::i8, shape, {1, -2, 0, 127, -128, 7});
}

TEST(NpyRoundTripTest, RanksZeroToFourAndZeroSizeDims) {
  expect_round_trip<float>(DType::f32, {}, {42.f});
  expect_round_trip<float>(DType::f32, {3}, {1.f, 2.f, 3.f});
  expect_round_trip<float>(DType::f32, {2, 2}, {1.f, 2.f, 3.f, 4.f});
  expect_round_trip<float>(DType::f32, {2, 1, 2}, {1.f, 2.f, 3.f, 4.f});
  expect_round_trip<float>(DType::f32, {1, 2, 1, 2}, {1.f, 2.f, 3.f, 4.f});
  expect_round_trip<float>(DType::f32, {0}, {});
  expect_round_trip<double>(DType::f64, {2, 0, 3}, {});
  expect_round_trip<std::int64_t>(DType::i64, {1, 0, 2, 3}, {});
}

TEST(NpyRoundTripTest, RankEightIsTheLimit) {
  const std::vector<std::int64_t> shape8{1, 2, 1, 2, 1, 1, 1, 2};
  expect_round_trip<std::int32_t>(DType::i32, shape8, {0, 1, 2, 3, 4, 5, 6, 7});
  const std::vector<std::int32_t> v(8);
  const std::vector<std::int64_t> shape9{1, 1, 1, 1, 1, 1, 1, 1, 1};
  try {
    encode_npy(DType::i32, shape9, v.data());
    FAIL() << "rank 9 encoded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 9"));
  }
}

TEST(NpyRoundTripTest, BoolBytesAreNormalised) {
  // NumPy reads any nonzero byte as True; a C++ bool must hold 0 or 1.
  NpyArray a = parse_npy(make_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                  std::string_view("\x00\x02\xff", 3)),
                         "b.npy");
  ASSERT_EQ(a.data.size(), 3u);
  EXPECT_EQ(a.data[0], std::byte{0});
  EXPECT_EQ(a.data[1], std::byte{1});
  EXPECT_EQ(a.data[2], std::byte{1});
}

// ---------------------------------------------------------------------------
// Header layout and compatibility with numpy

// np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3))
std::string numpy_f32_2x3() {
  std::string s("\x93NUMPY\x01\x00\x76\x00", 10);
  s += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  s += std::string(58, ' ') + "\n";
  const std::vector<float> v{0, 1, 2, 3, 4, 5};
  return s + raw(v);
}

TEST(NpyHeaderTest, EncodeMatchesNumpyBytes) {
  const std::vector<float> v{0, 1, 2, 3, 4, 5};
  const std::vector<std::int64_t> shape{2, 3};
  EXPECT_EQ(to_string(encode_npy(DType::f32, shape, v.data())), numpy_f32_2x3());
}

// np.save of float16 [1, -2, 65504, inf, -0, 2^-24] and of int8 [[1, -2, 127], [-128, 0, 7]]: the
// same header text (descr '<f2' and '|i1'), padding and little-endian bits.
TEST(NpyHeaderTest, Float16AndInt8MatchNumpyBytes) {
  const std::vector<std::uint16_t> h{0x3c00, 0xc000, 0x7bff, 0x7c00, 0x8000, 0x0001};
  const std::vector<std::int64_t> h_shape{6};
  EXPECT_EQ(to_string(encode_npy(DType::f16, h_shape, h.data())),
            to_string(make_npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (6,), }", raw(h))));
  const std::vector<std::int8_t> i{1, -2, 127, -128, 0, 7};
  const std::vector<std::int64_t> i_shape{2, 3};
  const std::vector<std::byte> encoded = encode_npy(DType::i8, i_shape, i.data());
  EXPECT_EQ(to_string(encoded),
            to_string(make_npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (2, 3), }", raw(i))));
  EXPECT_EQ(encoded.size(), 134u);  // as numpy's file
}

TEST(NpyHeaderTest, EncodedHeaderIsPaddedAndNewlineTerminated) {
  // Zero-element shapes, so the file is the header alone.
  const std::vector<std::int64_t> shapes[] = {{0}, {3, 0}, {0, 2, 3}, {123456789, 0, 987654321, 1, 2, 3, 4, 5}};
  for (const auto& shape : shapes) {
    const std::vector<std::byte> b = encode_npy(DType::i64, shape, nullptr);
    const std::string s = to_string(b);
    ASSERT_GE(s.size(), 64u);
    EXPECT_EQ(s.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8)) << "version 1.0 when the header fits";
    const std::size_t header_len = static_cast<unsigned char>(s[8]) | static_cast<unsigned char>(s[9]) << 8;
    const std::size_t data_begin = 10 + header_len;
    EXPECT_EQ(data_begin % 64, 0u);
    EXPECT_EQ(s[data_begin - 1], '\n');
    EXPECT_EQ(s.size(), data_begin);  // zero elements
  }
}

TEST(NpyHeaderTest, EncodedShapeReprMatchesPython) {
  std::int64_t x = 0;
  const std::vector<std::int64_t> scalar{}, one{3};
  EXPECT_THAT(to_string(encode_npy(DType::i64, scalar, &x)), HasSubstr("'shape': (), }"));
  std::int64_t y[3] = {};
  EXPECT_THAT(to_string(encode_npy(DType::i64, one, y)), HasSubstr("'shape': (3,), }"));
  bool z[3] = {};
  EXPECT_THAT(to_string(encode_npy(DType::boolean, one, z)), HasSubstr("'descr': '|b1'"));
}

TEST(NpyHeaderTest, ParsesNumpyFloat32Matrix) {
  NpyArray a = parse_npy(to_bytes(numpy_f32_2x3()), "np.npy");
  EXPECT_EQ(a.dtype, DType::f32);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.as<float>()[5], 5.f);
}

TEST(NpyHeaderTest, ParsesNumpyScalar) {
  // np.save(f, np.float64(1.5))
  std::string s("\x93NUMPY\x01\x00\x76\x00", 10);
  s += "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
  s += std::string(62, ' ') + "\n";
  s += raw(std::vector<double>{1.5});
  NpyArray a = parse_npy(to_bytes(s), "scalar.npy");
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.numel(), 1);
  EXPECT_EQ(*a.as<double>(), 1.5);
  const TensorView v = a.view();
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.shape[0], 1);
}

TEST(NpyHeaderTest, ParsesNumpyVectorAndBool) {
  // np.save(f, np.array([1, -2, 3], dtype=np.int64))
  std::string s("\x93NUMPY\x01\x00\x76\x00", 10);
  s += "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
  s += std::string(60, ' ') + "\n";
  s += raw(std::vector<std::int64_t>{1, -2, 3});
  NpyArray a = parse_npy(to_bytes(s), "vec.npy");
  EXPECT_EQ(a.dtype, DType::i64);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(a.as<std::int64_t>()[1], -2);

  // np.save(f, np.array([[True, False], [False, True]]))
  std::string t("\x93NUMPY\x01\x00\x76\x00", 10);
  t += "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }";
  t += std::string(58, ' ') + "\n";
  t += std::string("\x01\x00\x00\x01", 4);
  NpyArray b = parse_npy(to_bytes(t), "mask.npy");
  EXPECT_EQ(b.dtype, DType::boolean);
  EXPECT_TRUE(b.as<bool>()[0]);
  EXPECT_FALSE(b.as<bool>()[1]);
  EXPECT_TRUE(b.as<bool>()[3]);
}

TEST(NpyHeaderTest, ParsesLegacySixteenByteAlignedHeader) {
  // numpy before 1.14 padded to 16 bytes, not 64.
  std::string s("\x93NUMPY\x01\x00\x46\x00", 10);
  s += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  s += std::string(10, ' ') + "\n";
  ASSERT_EQ(s.size(), 80u);
  s += raw(std::vector<float>{0, 1, 2, 3, 4, 5});
  NpyArray a = parse_npy(to_bytes(s), "old.npy");
  EXPECT_EQ(a.as<float>()[4], 4.f);
}

TEST(NpyHeaderTest, ParsesVersion2Header) {
  const auto b = make_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw(std::vector<float>{7, 8}));
  EXPECT_EQ(b.size() % 64, 8u);
  NpyArray a = parse_npy(b, "v2.npy");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(a.as<float>()[1], 8.f);
}

TEST(NpyHeaderTest, ParsesVersion2HeaderLongerThan64KiB) {
  // Version 2.0 exists for headers whose length does not fit in 16 bits.
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }";
  header += std::string(70000, ' ');
  NpyArray a = parse_npy(make_npy(2, header, raw(std::vector<std::int32_t>{9})), "big.npy");
  EXPECT_EQ(a.as<std::int32_t>()[0], 9);
}

TEST(NpyHeaderTest, ParsesVersion3Header) {
  NpyArray a = parse_npy(
      make_npy(3, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1), }", raw(std::vector<std::int32_t>{-5})),
      "v3.npy");
  EXPECT_EQ(a.as<std::int32_t>()[0], -5);
}

TEST(NpyHeaderTest, AcceptsOtherWritersDictSpelling) {
  const std::string data = raw(std::vector<float>{1, 2, 3, 4, 5, 6});
  const std::string headers[] = {
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",  // double quotes, no trailing comma
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",         // other key order
      "{ 'descr' : '=f4' ,\t'fortran_order':False,'shape':( 2 ,3 , ) , }",  // spacing, '=' order, tuple comma
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",     // Python 2 longs
      "\n {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } \r\n",
  };
  for (const std::string& h : headers) {
    SCOPED_TRACE(h);
    NpyArray a = parse_npy(make_npy(1, h, data), "x.npy");
    EXPECT_EQ(a.dtype, DType::f32);
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  }
  // Unpadded and without the final newline is still readable.
  NpyArray a = parse_npy(make_npy(1, "{'descr':'<f4','fortran_order':False,'shape':(6,)}", data, false), "x.npy");
  EXPECT_EQ(a.numel(), 6);
}

TEST(NpyHeaderTest, AcceptsEveryDescrSpelling) {
  struct Case {
    const char* descr;
    DType dtype;
  };
  const Case cases[] = {{"<f4", DType::f32}, {"=f4", DType::f32},     {"<f8", DType::f64},
                        {"=f8", DType::f64}, {"<f2", DType::f16},     {"=f2", DType::f16},
                        {"|b1", DType::boolean}, {"<i4", DType::i32}, {"=i4", DType::i32},
                        {"<i8", DType::i64}, {"=i8", DType::i64},     {"|i1", DType::i8},
                        {"<i1", DType::i8},  {"=i1", DType::i8}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.descr);
    const std::string data(sdpa::dtype_size(c.dtype), '\0');
    NpyArray a = parse_npy(
        make_npy(1, std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (1,), }", data), "x");
    EXPECT_EQ(a.dtype, c.dtype);
  }
}

// ---------------------------------------------------------------------------
// NpyArray accessors

TEST(NpyArrayTest, ViewIsContiguous) {
  const std::vector<std::int64_t> shape{2, 3, 4};
  std::vector<float> v(24);
  NpyArray a = parse_npy(encode_npy(DType::f32, shape, v.data()), "q.npy");
  const TensorView t = a.view();
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.data, static_cast<void*>(a.data.data()));
  EXPECT_EQ(t.dtype, DType::f32);
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_EQ(t.stride[1], 4);
  EXPECT_EQ(t.stride[2], 1);
}

TEST(NpyArrayTest, ViewRejectsRankAboveFourNamingTheArray) {
  const std::vector<std::int64_t> shape{1, 1, 1, 1, 2};
  std::vector<float> v(2);
  NpyArray a = parse_npy(encode_npy(DType::f32, shape, v.data()), "--q");
  try {
    a.view();
    FAIL() << "rank 5 view";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--q"));
    EXPECT_THAT(e.what(), HasSubstr("rank 5"));
  }
}

TEST(NpyArrayTest, AsRejectsWrongDtype) {
  const std::vector<std::int64_t> shape{2};
  std::vector<float> v(2);
  NpyArray a = parse_npy(encode_npy(DType::f32, shape, v.data()), "k.npy");
  EXPECT_NE(a.as<float>(), nullptr);
  try {
    a.as<double>();
    FAIL() << "as<double> on float32";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("k.npy"));
    EXPECT_THAT(e.what(), HasSubstr("float64"));
    EXPECT_THAT(e.what(), HasSubstr("float32"));
  }
  const NpyArray& c = a;
  EXPECT_THROW(c.as<std::int32_t>(), Error);
}

// ---------------------------------------------------------------------------
// Malformed input: one test per failure, each checking the key fact is named.

const std::string kGoodHeader = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
const std::string kTwoFloats = raw(std::vector<float>{1, 2});

TEST(NpyMalformedTest, WrongMagic) {
  const std::string msg = parse_error(to_bytes(std::string("PK\x03\x04 this is a zip file", 24)));
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("magic"));
  EXPECT_THAT(msg, HasSubstr("PK\\x03\\x04"));
}

TEST(NpyMalformedTest, EmptyFileIsTruncated) {
  const std::string msg = parse_error({});
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
  EXPECT_THAT(msg, HasSubstr("0 bytes"));
}

TEST(NpyMalformedTest, UnsupportedVersion) {
  auto b = make_npy(1, kGoodHeader, kTwoFloats);
  b[6] = std::byte{4};
  std::string msg = parse_error(b);
  EXPECT_THAT(msg, HasSubstr("version 4.0"));
  EXPECT_THAT(msg, HasSubstr("1.0, 2.0 or 3.0"));
  b[6] = std::byte{1};
  b[7] = std::byte{1};
  EXPECT_THAT(parse_error(b), HasSubstr("version 1.1"));
}

TEST(NpyMalformedTest, TruncatedHeader) {
  // Magic and version, but the length field is cut off.
  std::string msg = parse_error(to_bytes(std::string("\x93NUMPY\x01\x00\x76", 9)));
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("truncated header"));
  EXPECT_THAT(msg, HasSubstr("9 bytes"));
  // Version 2.0 needs a 4-byte length field.
  msg = parse_error(to_bytes(std::string("\x93NUMPY\x02\x00\x76\x00\x00", 11)));
  EXPECT_THAT(msg, HasSubstr("truncated header"));
}

TEST(NpyMalformedTest, HeaderLengthPastEnd) {
  std::string s("\x93NUMPY\x01\x00\xff\xff", 10);
  s += kGoodHeader;
  const std::string msg = parse_error(to_bytes(s));
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("header length 65535"));
  EXPECT_THAT(msg, HasSubstr("past the end"));
}

TEST(NpyMalformedTest, UnparsableDict) {
  std::string msg = header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)");
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("Python dict literal"));
  EXPECT_THAT(msg, HasSubstr("'descr'"));  // shows the header text
  EXPECT_THAT(header_error("{'descr': '<f4, 'fortran_order': False}"), HasSubstr("expected ',' or '}'"));
  EXPECT_THAT(header_error("{'descr': '<f4\n"), HasSubstr("unterminated string"));
  EXPECT_THAT(header_error("{'descr': numpy.float32}"), HasSubstr("unknown name 'numpy'"));
  EXPECT_THAT(header_error("{'descr': '<f4'} extra"), HasSubstr("unexpected text after"));
  EXPECT_THAT(header_error("{'a' 1}"), HasSubstr("expected ':'"));
  EXPECT_THAT(header_error(""), HasSubstr("unexpected end of header"));
  EXPECT_THAT(header_error("{'shape': (99999999999999999999,)}"), HasSubstr("does not fit in int64"));
  EXPECT_THAT(header_error("{'descr': " + std::string(100, '(')), HasSubstr("nesting too deep"));
  EXPECT_THAT(header_error("'descr'"), HasSubstr("a dict as the .npy header"));
  EXPECT_THAT(header_error(std::string("{\x01}", 3)), HasSubstr("\\x01"));
}

TEST(NpyMalformedTest, MissingKeys) {
  const std::string msg = header_error("{'descr': '<f4', 'fortran_order': False, }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("missing 'shape'"));
  EXPECT_THAT(header_error("{}"), HasSubstr("missing 'descr', 'fortran_order', 'shape'"));
}

TEST(NpyMalformedTest, UnknownOrDuplicateKey) {
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", kTwoFloats),
              HasSubstr("key 'extra'"));
  EXPECT_THAT(header_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", kTwoFloats),
              HasSubstr("key 'descr' twice"));
}

TEST(NpyMalformedTest, FortranOrderTrue) {
  const std::string msg = header_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("expected C order"));
  EXPECT_THAT(msg, HasSubstr("fortran_order True"));
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", kTwoFloats),
              HasSubstr("fortran_order True or False"));
}

TEST(NpyMalformedTest, UnsupportedDtype) {
  for (const char* descr : {"|u1", "<u4", "<c8", "<f16", "|S4", "f4", "|f4", "<M8[ns]", "|O"}) {
    SCOPED_TRACE(descr);
    const std::string msg =
        header_error(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }", kTwoFloats);
    EXPECT_THAT(msg, HasSubstr("bad.npy"));
    EXPECT_THAT(msg, HasSubstr(std::string("unsupported dtype '") + descr + "'"));
    EXPECT_THAT(msg, HasSubstr("'<f4'"));  // lists what is supported
  }
}

TEST(NpyMalformedTest, StructuredDtype) {
  const std::string msg =
      header_error("{'descr': [('x', '<f4'), ('y', '<f4')], 'fortran_order': False, 'shape': (1,), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("simple dtype string"));
  EXPECT_THAT(msg, HasSubstr("[('x', '<f4'), ('y', '<f4')]"));
}

TEST(NpyMalformedTest, BigEndianDtype) {
  const std::string msg = header_error("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("little-endian"));
  EXPECT_THAT(msg, HasSubstr("big-endian dtype '>f4'"));
  EXPECT_THAT(header_error("{'descr': '>i8', 'fortran_order': False, 'shape': (0,), }"), HasSubstr("big-endian"));
}

TEST(NpyMalformedTest, NegativeDim) {
  const std::string msg = header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("non-negative"));
  EXPECT_THAT(msg, HasSubstr("(2, -1)"));
}

TEST(NpyMalformedTest, ShapeNotATupleOfInts) {
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", kTwoFloats),
              HasSubstr("tuple of ints"));
  // "(2)" is the int 2 in Python, not a tuple.
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", kTwoFloats),
              HasSubstr("tuple of ints for 'shape', got 2"));
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': ('2',), }", kTwoFloats),
              HasSubstr("tuple of ints"));
}

TEST(NpyMalformedTest, RankAboveEight) {
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,2), }", kTwoFloats),
              HasSubstr("rank 9"));
}

TEST(NpyMalformedTest, ElementCountOverflow) {
  const std::string msg =
      header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("element count"));
  EXPECT_THAT(msg, HasSubstr("overflow"));
}

TEST(NpyMalformedTest, ByteCountOverflow) {
  // 2^61 elements fit in int64, but 2^61 * 8 bytes do not.
  const std::string msg =
      header_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("byte count"));
  EXPECT_THAT(msg, HasSubstr("overflow"));
}

TEST(NpyMalformedTest, StrideOverflowBehindAZeroExtent) {
  // No element at all, but the strides of the axes before the 0 cannot be represented.
  for (const char* shape : {"(0, 4294967296, 4294967296)", "(0, 2, 4611686018427387904)"}) {
    const std::string msg = header_error(
        std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") + shape + ", }", "");
    EXPECT_THAT(msg, HasSubstr("strides that fit in int64")) << shape;
  }
}

TEST(NpyMalformedTest, HugeShapeIsRejectedBeforeAllocating) {
  // 8 TB claimed, 8 bytes present: must be a clean error, not an allocation.
  const std::string msg =
      header_error("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }", kTwoFloats);
  EXPECT_THAT(msg, HasSubstr("8000000000000 bytes"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(NpyMalformedTest, TruncatedData) {
  const std::string msg = header_error(kGoodHeader, kTwoFloats.substr(0, 6));
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("expected 8 bytes of data"));
  EXPECT_THAT(msg, HasSubstr("got 6 bytes (file truncated)"));
}

TEST(NpyMalformedTest, TrailingBytes) {
  const std::string msg = header_error(kGoodHeader, kTwoFloats + "xyz");
  EXPECT_THAT(msg, HasSubstr("bad.npy"));
  EXPECT_THAT(msg, HasSubstr("expected 8 bytes of data"));
  EXPECT_THAT(msg, HasSubstr("3 trailing bytes"));
}

TEST(NpyMalformedTest, EveryTruncationIsACleanError) {
  const std::vector<std::int64_t> shape{2, 3};
  const std::vector<std::int32_t> v{1, 2, 3, 4, 5, 6};
  const std::vector<std::byte> good = encode_npy(DType::i32, shape, v.data());
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse_npy(cut, "cut.npy"), Error) << "prefix of " << n << " bytes";
  }
}

TEST(NpyMalformedTest, CorruptedHeaderBytesNeverCrash) {
  // Every header byte replaced by a few hostile values: the parser must either
  // succeed or throw sdpa::Error (the sanitizers catch anything worse).
  const std::vector<std::int64_t> shape{2, 3};
  const std::vector<std::int32_t> v{1, 2, 3, 4, 5, 6};
  const std::vector<std::byte> good = encode_npy(DType::i32, shape, v.data());
  const std::size_t data_begin = good.size() - v.size() * sizeof(std::int32_t);
  for (std::size_t i = 0; i < data_begin; ++i) {
    for (unsigned char c : std::string_view("\x00\x7f\xff(){}',-9\n", 12)) {
      std::vector<std::byte> bad = good;
      bad[i] = std::byte{c};
      try {
        parse_npy(bad, "fuzz.npy");
      } catch (const Error&) {
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Encoding errors

TEST(NpyEncodeTest, RejectsBfloat16) {
  std::uint16_t x = 0;
  const std::vector<std::int64_t> shape{1};
  try {
    encode_npy(DType::bf16, shape, &x);
    FAIL() << "bfloat16 encoded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bfloat16"));
  }
}

TEST(NpyEncodeTest, RejectsNegativeDimsOverflowAndNullData) {
  float x = 0;
  const std::vector<std::int64_t> negative{2, -3}, huge{4611686018427387904, 4}, two{2};
  EXPECT_THAT([&] { encode_npy(DType::f32, negative, &x); },
              ::testing::ThrowsMessage<Error>(HasSubstr("non-negative")));
  EXPECT_THAT([&] { encode_npy(DType::f32, huge, &x); }, ::testing::ThrowsMessage<Error>(HasSubstr("overflow")));
  EXPECT_THAT([&] { encode_npy(DType::f32, two, nullptr); }, ::testing::ThrowsMessage<Error>(HasSubstr("nullptr")));
}

// ---------------------------------------------------------------------------
// Files

// A fresh, empty directory per test, removed afterwards.
class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sdpa_npy_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  void expect_no_temp_files() const {
    for (const std::string& n : entries()) EXPECT_EQ(n.find(".tmp"), std::string::npos) << "left behind: " << n;
  }

  fs::path dir_;
};

TEST_F(NpyFileTest, WriteThenReadFile) {
  const std::string file = path("rt.npy");
  const std::vector<double> v{1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> shape{3, 2};
  write_npy(file, DType::f64, shape, v.data());
  NpyArray a = read_npy(file);
  EXPECT_EQ(a.dtype, DType::f64);
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.name, file);
  EXPECT_EQ(std::vector<double>(a.as<double>(), a.as<double>() + 6), v);
}

TEST_F(NpyFileTest, WriteCreatesExactlyTheEncodedBytes) {
  const std::vector<std::int64_t> shape{2, 3};
  const std::vector<float> v{0, 1, 2, 3, 4, 5};
  write_npy(path("a.npy"), DType::f32, shape, v.data());
  std::ifstream in(path("a.npy"), std::ios::binary);
  const std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, numpy_f32_2x3());
  EXPECT_EQ(entries(), std::vector<std::string>{"a.npy"});
}

TEST_F(NpyFileTest, ReadRoundTripsEveryDtype) {
  const std::vector<std::int64_t> shape{3};
  const std::vector<std::int64_t> i64{1, -2, 3};
  const std::vector<std::uint16_t> f16{0x3c00, 0x4000, 0x4200};
  const bool b[3] = {true, false, true};
  write_npy(path("i64.npy"), DType::i64, shape, i64.data());
  write_npy(path("f16.npy"), DType::f16, shape, f16.data());
  write_npy(path("b.npy"), DType::boolean, shape, b);
  NpyArray a = read_npy(path("i64.npy"));
  EXPECT_EQ(std::vector<std::int64_t>(a.as<std::int64_t>(), a.as<std::int64_t>() + 3), i64);
  NpyArray h = read_npy(path("f16.npy"));
  EXPECT_EQ(std::vector<std::uint16_t>(h.as<std::uint16_t>(), h.as<std::uint16_t>() + 3), f16);
  NpyArray m = read_npy(path("b.npy"));
  EXPECT_TRUE(m.as<bool>()[0]);
  EXPECT_FALSE(m.as<bool>()[1]);
  const std::vector<std::int64_t> empty_shape{0, 4};
  write_npy(path("empty.npy"), DType::f32, empty_shape, nullptr);
  NpyArray e = read_npy(path("empty.npy"));
  EXPECT_EQ(e.shape, empty_shape);
  EXPECT_TRUE(e.data.empty());
  expect_no_temp_files();
}

// float16 files hold IEEE binary16: every class of value (zeros, normals,
// the largest, subnormals, infinities, NaN) comes back bit for bit, and reads
// as the float32 it stands for.
TEST_F(NpyFileTest, Float16ValuesRoundTripThroughAFile) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values{0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, -65504.0f, 6.103515625e-05f /* 2^-14 */,
                                  5.9604644775390625e-08f /* 2^-24 */, 0.333251953125f, inf, -inf};
  std::vector<std::uint16_t> bits;
  for (float v : values) bits.push_back(sdpa::float_to_half(v));
  bits.push_back(0x7e00);  // a quiet NaN
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(bits.size())};
  write_npy(path("h.npy"), DType::f16, shape, bits.data());
  const NpyArray a = read_npy(path("h.npy"));
  ASSERT_EQ(a.dtype, DType::f16);
  ASSERT_EQ(a.shape, shape);
  EXPECT_EQ(std::vector<std::uint16_t>(a.as<std::uint16_t>(), a.as<std::uint16_t>() + bits.size()), bits);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float back = sdpa::half_to_float(a.as<std::uint16_t>()[i]);
    EXPECT_EQ(back, values[i]) << i;
    EXPECT_EQ(std::signbit(back), std::signbit(values[i])) << i;
  }
  EXPECT_TRUE(std::isnan(sdpa::half_to_float(a.as<std::uint16_t>()[values.size()])));
  // int8 too, through the typed accessor.
  const std::vector<std::int8_t> i8{-128, -1, 0, 1, 127};
  const std::vector<std::int64_t> i8_shape{5};
  write_npy(path("i.npy"), DType::i8, i8_shape, i8.data());
  const NpyArray b = read_npy(path("i.npy"));
  EXPECT_EQ(std::vector<std::int8_t>(b.as<std::int8_t>(), b.as<std::int8_t>() + 5), i8);
  expect_no_temp_files();
}

TEST_F(NpyFileTest, ReadMissingFileNamesThePath) {
  try {
    read_npy(path("missing.npy"));
    FAIL() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("missing.npy")));
    EXPECT_THAT(e.what(), HasSubstr("No such file"));
  }
}

TEST_F(NpyFileTest, ReadDirectoryFails) {
  EXPECT_THAT([&] { read_npy(dir_.string()); }, ::testing::ThrowsMessage<Error>(HasSubstr("a directory")));
}

TEST_F(NpyFileTest, ReadMalformedFileNamesThePath) {
  const std::vector<std::int64_t> shape{4};
  const std::vector<float> v{1, 2, 3, 4};
  const std::string good = to_string(encode_npy(DType::f32, shape, v.data()));
  {
    std::ofstream out(path("short.npy"), std::ios::binary);
    out << good.substr(0, good.size() - 3);
  }
  try {
    read_npy(path("short.npy"));
    FAIL() << "read a truncated file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("short.npy")));
    EXPECT_THAT(e.what(), HasSubstr("truncated"));
  }
  {
    std::ofstream out(path("long.npy"), std::ios::binary);
    out << good << "!!";
  }
  EXPECT_THAT([&] { read_npy(path("long.npy")); }, ::testing::ThrowsMessage<Error>(HasSubstr("2 trailing bytes")));
  {
    std::ofstream out(path("magic.npy"), std::ios::binary);
    out << "\x89PNG\r\n\x1a\n";
  }
  EXPECT_THAT([&] { read_npy(path("magic.npy")); },
              ::testing::ThrowsMessage<Error>(HasSubstr(path("magic.npy") + ": expected a .npy file")));
  {
    std::ofstream out(path("past.npy"), std::ios::binary);
    out << std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12) << "{}";
  }
  EXPECT_THAT([&] { read_npy(path("past.npy")); }, ::testing::ThrowsMessage<Error>(HasSubstr("past the end")));
}

TEST_F(NpyFileTest, WriteIntoMissingFolderThrowsAndLeavesNothing) {
  const std::string target = (dir_ / "no_such_folder" / "x.npy").string();
  const std::vector<std::int64_t> shape{2};
  const std::vector<float> v{1, 2};
  try {
    write_npy(target, DType::f32, shape, v.data());
    FAIL() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(target));
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "no_such_folder"));
  EXPECT_TRUE(entries().empty());
}

TEST_F(NpyFileTest, WriteReplacesExistingFileFully) {
  // A longer old file must not leave a tail behind the shorter new one.
  {
    std::ofstream out(path("x.npy"), std::ios::binary);
    out << std::string(10000, 'z');
  }
  const std::vector<std::int64_t> shape{2};
  const std::vector<std::int32_t> v{3, 4};
  write_npy(path("x.npy"), DType::i32, shape, v.data());
  EXPECT_EQ(fs::file_size(path("x.npy")), encode_npy(DType::i32, shape, v.data()).size());
  NpyArray a = read_npy(path("x.npy"));
  EXPECT_EQ(a.as<std::int32_t>()[1], 4);
  EXPECT_EQ(entries(), std::vector<std::string>{"x.npy"});
}

TEST_F(NpyFileTest, WriteKeepsPermissionsOfReplacedFile) {
  const std::vector<std::int64_t> shape{1};
  const float v = 1;
  write_npy(path("p.npy"), DType::f32, shape, &v);
  fs::permissions(path("p.npy"), fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  write_npy(path("p.npy"), DType::f32, shape, &v);
  EXPECT_EQ(fs::status(path("p.npy")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
}

TEST_F(NpyFileTest, FailedRenameRemovesTheTemporaryFile) {
  // The destination is a non-empty directory: the temporary file is written,
  // then rename() fails and the temporary file must be removed.
  fs::create_directory(dir_ / "target.npy");
  { std::ofstream(dir_ / "target.npy" / "keep") << "keep"; }
  const std::vector<std::int64_t> shape{2};
  const std::vector<float> v{1, 2};
  try {
    write_npy(path("target.npy"), DType::f32, shape, v.data());
    FAIL() << "renamed over a directory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("target.npy")));
    EXPECT_THAT(e.what(), HasSubstr("rename"));
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"target.npy"});
  EXPECT_TRUE(fs::is_directory(dir_ / "target.npy"));
  EXPECT_TRUE(fs::exists(dir_ / "target.npy" / "keep"));
}

TEST_F(NpyFileTest, InvalidArrayLeavesExistingFileUntouched) {
  const std::vector<std::int64_t> shape{2};
  const std::vector<float> v{1, 2};
  write_npy(path("x.npy"), DType::f32, shape, v.data());
  const auto before = fs::file_size(path("x.npy"));
  EXPECT_THROW(write_npy(path("x.npy"), DType::bf16, shape, v.data()), Error);
  const std::vector<std::int64_t> negative{-1};
  EXPECT_THROW(write_npy(path("x.npy"), DType::f32, negative, v.data()), Error);
  EXPECT_EQ(fs::file_size(path("x.npy")), before);
  EXPECT_EQ(read_npy(path("x.npy")).as<float>()[1], 2.f);
  EXPECT_EQ(entries(), std::vector<std::string>{"x.npy"});
}

TEST_F(NpyFileTest, NoTemporaryFilesAfterManyWrites) {
  const std::vector<std::int64_t> shape{4};
  const std::vector<double> v{1, 2, 3, 4};
  for (int i = 0; i < 20; ++i) write_npy(path("same.npy"), DType::f64, shape, v.data());
  for (int i = 0; i < 5; ++i) write_npy(path("n" + std::to_string(i) + ".npy"), DType::f64, shape, v.data());
  EXPECT_EQ(entries().size(), 6u);
  expect_no_temp_files();
}

}  // namespace
