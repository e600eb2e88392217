#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(UnicodeTest, InvalidBytesBecomeOneReplacementPerMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(to_valid_utf8("abc"), "abc");
  EXPECT_EQ(to_valid_utf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(to_valid_utf8("\xFF"), r);
  EXPECT_EQ(to_valid_utf8("\xE4\xBD"), r);  // a truncated 3-byte sequence: one
  EXPECT_EQ(to_valid_utf8("\xE4\xBD"
                          "a"),
            r + "a");                                   // ... and the byte after it survives
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\xA4"), r);          // a truncated 4-byte sequence
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), r + r);          // overlong: each byte
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), r + r + r);  // a surrogate: each byte
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(to_valid_utf8("\x80\x80"), r + r);                  // lone continuation bytes
}

TEST(UnicodeTest, IncompleteTailsAreOnlyUnfinishedSequences) {
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE4"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE4\xBD"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("a\xF0\x9F\xA4"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE4\xBD\xA0"), 0u);  // complete
  EXPECT_EQ(incomplete_utf8_tail("a\xFF"), 0u);          // invalid, not unfinished
  EXPECT_EQ(incomplete_utf8_tail("a\xE4"
                                 "b"),
            0u);
}

TEST(UnicodeTest, NormalizationAndWhitespace) {
  EXPECT_EQ(unicode_normalize("e\xCC\x81", NormalizationForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(unicode_normalize("\xC3\xA9", NormalizationForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalizationForm::kNfkc), "fi");
  EXPECT_EQ(strip_marks("e\xCC\x81"
                        "a"),
            "ea");
  EXPECT_EQ(to_lower("ÀB"), "àb");
  EXPECT_EQ(trim_start("\xE3\x80\x80 \t x "), "x ");  // U+3000 is white space
  EXPECT_EQ(trim_end(" x\xEF\xBB\xBF"), " x");        // so is U+FEFF, in JavaScript's trim
  std::vector<std::string> pieces = split_code_points("a\xC3\xA9\xF0\x9F\xA4\x97");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "\xC3\xA9", "\xF0\x9F\xA4\x97"}));
}

std::string utf8_of(const std::vector<char32_t>& points) {
  std::string out;
  for (const char32_t cp : points)
    append_utf8(out, cp);
  return out;
}

// Each form against Python's unicodedata.normalize: marks reordered by combining class (U+0316,
// class 220, before U+0301, 230) and composed past marks of a lower class, Hangul syllables
// decomposed and composed, the fi ligature kept or split.
TEST(UnicodeTest, NormalizationFormsMatchPython) {
  const std::string marks = utf8_of({'a', 0x301, 0x301, 0x301, 0x316, 0x316, 0x316});
  const std::string mixed = utf8_of({0xAC00, 0x301, 0x1100, 0x1161, 0x11A8, 0xFB01, 0xC5});
  EXPECT_EQ(unicode_normalize(marks, NormalizationForm::kNfc),
            utf8_of({0xE1, 0x316, 0x316, 0x316, 0x301, 0x301}));
  EXPECT_EQ(unicode_normalize(marks, NormalizationForm::kNfd),
            utf8_of({'a', 0x316, 0x316, 0x316, 0x301, 0x301, 0x301}));
  EXPECT_EQ(unicode_normalize(mixed, NormalizationForm::kNfc),
            utf8_of({0xAC00, 0x301, 0xAC01, 0xFB01, 0xC5}));
  EXPECT_EQ(unicode_normalize(mixed, NormalizationForm::kNfd),
            utf8_of({0x1100, 0x1161, 0x301, 0x1100, 0x1161, 0x11A8, 0xFB01, 'A', 0x30A}));
  EXPECT_EQ(unicode_normalize(mixed, NormalizationForm::kNfkc),
            utf8_of({0xAC00, 0x301, 0xAC01, 'f', 'i', 0xC5}));
  EXPECT_EQ(unicode_normalize(mixed, NormalizationForm::kNfkd),
            utf8_of({0x1100, 0x1161, 0x301, 0x1100, 0x1161, 0x11A8, 'f', 'i', 'A', 0x30A}));
  // A long run of marks is put in order by a sort, not by neighbour swaps (quadratic: a 100 KB
  // run took 10 s).
  std::vector<char32_t> run = {'a'};
  run.insert(run.end(), 50000, 0x301);
  run.insert(run.end(), 50000, 0x316);
  std::vector<char32_t> ordered = {0xE1};
  ordered.insert(ordered.end(), 50000, 0x316);
  ordered.insert(ordered.end(), 49999, 0x301);
  EXPECT_EQ(unicode_normalize(utf8_of(run), NormalizationForm::kNfc), utf8_of(ordered));
  // Invalid bytes normalize as the replacement character they are read as.
  EXPECT_EQ(unicode_normalize("a\xFF"
                              "b",
                              NormalizationForm::kNfc),
            "a\xEF\xBF\xBD"
            "b");
}

}  // namespace
}  // namespace pagoda
