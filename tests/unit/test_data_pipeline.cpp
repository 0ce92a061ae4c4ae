// The data pipeline below the tokenizer: JSONL shares per rank, text documents and
// instruction records to tokens, padding and packing into rows, and the labels a sample
// yields — prompt and padding tokens must carry no loss. Uses the demo model's byte-level
// tokenizer (byte b is id b, BOS 256, EOS 257, PAD 258), so expected ids are plain bytes.
#include <gtest/gtest.h>

#include <functional>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "data/jsonl_reader.hpp"
#include "data/token_arrays.hpp"
#include "data/prepare.hpp"
#include "data/record_tokenizer.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "io/hdf5_file.hpp"
#include "model/labels.hpp"

namespace d = superoffload::data;
namespace fs = std::filesystem;

namespace {

const std::string kDemoModel = std::string(SUPEROFFLOAD_SOURCE_DIR) + "/configs/models/tiny-llama";
constexpr int64_t kBos = 256, kEos = 257, kPad = 258;

class DataPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = d::load_tokenizer(kDemoModel);
    dir_ = fs::temp_directory_path() / ("so_data_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // Short templates keep the expected ids readable.
    data_.prompt_template = "Q:{instruction}|{input}\nA:";
    data_.prompt_template_no_input = "Q:{instruction}\nA:";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  d::GatheredRecords tokenize(const std::vector<nlohmann::json>& records, d::RecordFormat format) {
    const d::RecordTokenizer record_tokenizer(*tokenizer_, data_, format);
    d::GatheredRecords all;
    for (const auto& record : records) {
      const auto t = record_tokenizer.tokenize(record, [] { return std::string("test"); });
      all.tokens.insert(all.tokens.end(), t.tokens.begin(), t.tokens.end());
      all.loss_mask.insert(all.loss_mask.end(), t.loss_mask.begin(), t.loss_mask.end());
      all.lengths.push_back(static_cast<int64_t>(t.tokens.size()));
    }
    return all;
  }

  std::unique_ptr<d::Tokenizer> tokenizer_;
  superoffload::config::DataConfig data_;
  fs::path dir_;
};

std::vector<uint32_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

TEST_F(DataPipeline, DemoTokenizerIsBytesWithBosAndEos) {
  EXPECT_EQ(tokenizer_->encode("Hi"), (std::vector<int32_t>{kBos, 'H', 'i'}));
  EXPECT_EQ(tokenizer_->eos_id(), kEos);
  EXPECT_EQ(tokenizer_->pad_id(), kPad);
  EXPECT_EQ(tokenizer_->decode({'o', 'k', kEos}), "ok</s>");
}

TEST_F(DataPipeline, TextDocumentsAreJoinedWithBosAndEos) {
  auto arrays = d::assemble_stream(tokenize({{{"text", "ab"}}, {{"text", "c"}}}, d::RecordFormat::text));
  EXPECT_EQ(arrays.tokens, (std::vector<uint32_t>{kBos, 'a', 'b', kEos, kBos, 'c', kEos}));
  EXPECT_EQ(arrays.doc_offsets, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(arrays.row_length, 0);
}

TEST_F(DataPipeline, PromptAndPaddingCarryNoLoss) {
  const auto records = tokenize({{{"instruction", "x"}, {"input", "y"}, {"output", "ok"}}}, d::RecordFormat::alpaca);
  // BOS, "Q:x|y\nA:" (prompt, no loss), "ok" EOS (loss).
  const auto prompt = bytes("Q:x|y\nA:");
  ASSERT_EQ(records.tokens.size(), 1 + prompt.size() + 3);
  d::PrepareStats stats;
  const int64_t seq_len = 16;
  auto rows = d::assemble_rows(records, seq_len + 1, false, kPad, stats);
  ASSERT_EQ(rows.rows(), 1);
  const d::TokenDataset dataset(rows, seq_len, "test");
  std::vector<int64_t> inputs(seq_len), labels(seq_len);
  dataset.sample(0, inputs.data(), labels.data());
  // Labels are the next tokens; only the response and its EOS count.
  std::vector<int64_t> counted;
  for (int64_t j = 0; j < seq_len; ++j) {
    if (labels[static_cast<size_t>(j)] != -100) counted.push_back(labels[static_cast<size_t>(j)]);
  }
  EXPECT_EQ(counted, (std::vector<int64_t>{'o', 'k', kEos}));
  EXPECT_EQ(inputs[0], kBos);
  EXPECT_EQ(inputs[static_cast<size_t>(seq_len - 1)], kPad) << "the row is padded";
  EXPECT_EQ(labels[static_cast<size_t>(seq_len - 1)], -100) << "padding is no target";
}

TEST_F(DataPipeline, NoInputUsesTheOtherTemplateAndBracesInValuesStay) {
  const auto records = tokenize({{{"instruction", "{input}"}, {"input", ""}, {"output", "z"}}}, d::RecordFormat::alpaca);
  std::vector<uint32_t> expected{kBos};
  for (auto c : bytes("Q:{input}\nA:z")) expected.push_back(c);
  expected.push_back(kEos);
  EXPECT_EQ(records.tokens, expected);
}

TEST_F(DataPipeline, PackingPutsSeveralSamplesInARowAndMasksEachPrompt) {
  const auto records = tokenize({{{"instruction", "a"}, {"output", "1"}}, {{"instruction", "b"}, {"output", "2"}},
                                 {{"instruction", "c"}, {"output", "3"}}},
                                d::RecordFormat::alpaca);
  // Each sample: BOS + "Q:a\nA:" (6) + "1" + EOS = 9 tokens; rows of 20 hold two.
  d::PrepareStats stats;
  const auto packed = d::assemble_rows(records, 20, true, kPad, stats);
  EXPECT_EQ(packed.rows(), 2);
  const auto padded = d::assemble_rows(records, 20, false, kPad, stats);
  EXPECT_EQ(padded.rows(), 3);
  int64_t loss_tokens = 0;
  for (size_t i = 0; i < packed.tokens.size(); ++i) {
    if (packed.loss_mask[i]) {
      ++loss_tokens;
      EXPECT_TRUE(packed.tokens[i] == kEos || (packed.tokens[i] >= '1' && packed.tokens[i] <= '3')) << i;
    }
  }
  EXPECT_EQ(loss_tokens, 6) << "three responses and their EOS";
  EXPECT_EQ(packed.tokens[9], kBos) << "the second sample follows the first directly";
  EXPECT_EQ(packed.doc_offsets, (std::vector<int64_t>{0, 9, 20})) << "where each sample starts";
  EXPECT_EQ(padded.doc_offsets, (std::vector<int64_t>{0, 20, 40}));

  // [data] attention = "document": positions restart at the second sample, and the first
  // sample's last token (its EOS) predicts nothing rather than the next sample's BOS.
  const d::TokenDataset documents(packed, 19, "test", 0, /*documents=*/true);
  std::vector<int64_t> inputs(19), labels(19), positions(19);
  documents.sample(0, inputs.data(), labels.data(), positions.data());
  for (int64_t j = 0; j < 19; ++j) EXPECT_EQ(positions[j], j < 9 ? j : j - 9) << j;
  EXPECT_EQ(labels[8], superoffload::model::kIgnoreLabel) << "no label across the boundary";
  EXPECT_EQ(labels[7], kEos) << "the response still predicts its EOS";
  // Without documents the row is one sequence (and the labels as before).
  const d::TokenDataset causal(packed, 19, "test");
  std::vector<int64_t> causal_labels(19);
  causal.sample(0, inputs.data(), causal_labels.data());
  EXPECT_EQ(causal_labels[8], superoffload::model::kIgnoreLabel) << "the next prompt's BOS carries no loss anyway";
  // A stream: a document that starts inside a sample restarts the positions there.
  d::TokenArrays stream;
  stream.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  stream.doc_offsets = {0, 3, 7};
  const d::TokenDataset text(stream, 4, "test", 0, true);
  text.sample(1, inputs.data(), labels.data(), positions.data());  // tokens 5..8 predicting 6..9
  EXPECT_EQ((std::vector<int64_t>(positions.begin(), positions.begin() + 4)), (std::vector<int64_t>{0, 1, 2, 0}));
  EXPECT_EQ(labels[2], superoffload::model::kIgnoreLabel) << "7 does not predict 8, which opens a document";
  EXPECT_EQ(labels[0], 6);
}

TEST_F(DataPipeline, SamplesWithoutAResponseLeftAreDroppedAndCounted) {
  const auto records = tokenize({{{"instruction", std::string(40, 'p')}, {"output", "r"}},
                                 {{"instruction", "q"}, {"output", std::string(40, 'r')}}},
                                d::RecordFormat::alpaca);
  d::PrepareStats stats;
  const auto rows = d::assemble_rows(records, 17, false, kPad, stats);
  EXPECT_EQ(stats.dropped, 1);
  EXPECT_EQ(stats.truncated, 2);
  EXPECT_EQ(rows.rows(), 1);
}

TEST_F(DataPipeline, JsonlSharesCoverEveryLineOnceInOrder) {
  std::string text;
  for (int i = 0; i < 37; ++i) text += "{\"text\": \"" + std::string(static_cast<size_t>(i % 7), 'x') + std::to_string(i) + "\"}\n\n";
  const auto path = write("lines.jsonl", text);
  for (int world : {1, 2, 3, 5}) {
    std::vector<std::string> seen;
    for (int rank = 0; rank < world; ++rank) {
      d::JsonlReader reader(path, rank, world);
      nlohmann::ordered_json record;
      while (reader.next(record)) seen.push_back(record["text"]);
    }
    ASSERT_EQ(seen.size(), 37u) << world << " ranks";
    for (int i = 0; i < 37; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)].substr(static_cast<size_t>(i % 7)), std::to_string(i));
  }
}

TEST_F(DataPipeline, BadRecordsNameFileAndLine) {
  const auto path = write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": oops}\n");
  d::JsonlReader reader(path, 0, 1);
  nlohmann::ordered_json record;
  ASSERT_TRUE(reader.next(record));
  try {
    reader.next(record);
    FAIL() << "no error for a broken line";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2"), std::string::npos) << e.what();
  }
  // Read as a chat template's values (prepare's chat records): the same errors, by line.
  const auto values = write("bad_values.jsonl", "{\"messages\": []}\n\n[1]\n{\"a\": \n");
  d::JsonlReader value_reader(values, 0, 1);
  superoffload::jinja::Value value;
  ASSERT_TRUE(value_reader.next(value));
  EXPECT_TRUE(value.is_dict());
  auto error_of_next = [&] {
    try {
      value_reader.next(value);
    } catch (const superoffload::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of_next().find(values + ":3: each line must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of_next().find(values + ":4: not valid JSON"), std::string::npos);
  const d::RecordTokenizer record_tokenizer(*tokenizer_, data_, d::RecordFormat::alpaca);
  try {
    record_tokenizer.tokenize({{"instruction", "x"}}, [] { return std::string("f.jsonl:7"); });
    FAIL() << "no error for a record without output";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.jsonl:7: the record has no \"output\""), std::string::npos) << e.what();
  }
}

// A token file whose "tokens" are not non-negative integers is refused, naming the file, the
// type or the first bad element: HDF5 would otherwise convert floats and clip negative ids to 0.
TEST_F(DataPipeline, TokenFilesHoldNonNegativeIntegerIdsOnly) {
  const auto path = (dir_ / "tokens.h5").string();
  auto message_of = [&] {
    try {
      d::read_token_file(path);
    } catch (const superoffload::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  {
    auto file = superoffload::io::Hdf5File::create(path);
    const float values[] = {1, 2, 3.5f};
    file.write_float("tokens", {3}, values);
  }
  auto message = message_of();
  EXPECT_NE(message.find(path + ": dataset \"tokens\" holds non-integer 32-bit values"), std::string::npos) << message;
  {
    auto file = superoffload::io::Hdf5File::create(path);
    const int64_t values[] = {5, 7, -3, 9};
    file.write_int64("tokens", {4}, values);
  }
  message = message_of();
  EXPECT_NE(message.find(path + ": dataset \"tokens\" element 2 is -3, not a token id"), std::string::npos) << message;
  {
    auto file = superoffload::io::Hdf5File::create(path);
    const int64_t values[] = {5, 7, 3, 9};
    file.write_int64("tokens", {4}, values);
  }
  EXPECT_EQ(d::read_token_file(path).tokens, (std::vector<uint32_t>{5, 7, 3, 9}));  // int64 ids load
}

TEST_F(DataPipeline, TokenIdsOutsideTheVocabularyAreNamedByPosition) {
  d::TokenArrays arrays;
  arrays.tokens = {1, 2, 3, 4, 52, 53, 7, 8};
  arrays.row_length = 4;
  try {
    d::TokenDataset dataset(arrays, 3, "data.h5", 53);
    ADD_FAILURE() << "id 53 of a vocabulary of 53 was accepted";
  } catch (const superoffload::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.h5: token element 5 (sample 1, position 1) is id 53, outside the "
                                         "model's vocabulary of 53"),
              std::string::npos)
        << e.what();
  }
  arrays.tokens[5] = 0;
  EXPECT_EQ(d::TokenDataset(arrays, 3, "data.h5", 53).size(), 2);
}

// tokenizer.json edited into a hostile one: each id problem is refused naming the file and
// the token (a negative added-token id used to be accepted; a huge one sized the id table).
TEST_F(DataPipeline, TokenizerIdsAreCheckedWhenLoaded) {
  std::ifstream in(kDemoModel + "/tokenizer.json");
  const auto valid = nlohmann::json::parse(in);
  const auto path = dir_ / "tokenizer.json";
  auto message_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto tokenizer = valid;
    edit(tokenizer);
    std::ofstream(path) << tokenizer.dump();
    try {
      d::load_tokenizer(path.string());
    } catch (const superoffload::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message_of([](nlohmann::json&) {}), "");
  const auto file = path.string() + ": ";
  auto message = message_of([](nlohmann::json& t) { t["added_tokens"][1]["id"] = -4; });
  EXPECT_NE(message.find(file + "added token \"</s>\" has id -4; token ids are integers in [0, 16777216)"),
            std::string::npos) << message;
  message = message_of([](nlohmann::json& t) { t["added_tokens"][1]["id"] = 4000000000LL; });
  EXPECT_NE(message.find("has id 4000000000"), std::string::npos) << message;
  message = message_of([](nlohmann::json& t) { t["model"]["vocab"]["a"] = 2.5; });
  EXPECT_NE(message.find(file + "vocabulary token \"a\" has id 2.5"), std::string::npos) << message;
  message = message_of([](nlohmann::json& t) { t["model"]["vocab"]["a"] = t["model"]["vocab"]["b"]; });
  EXPECT_NE(message.find("share id"), std::string::npos) << message;
  message = message_of([](nlohmann::json& t) { t["added_tokens"][2]["id"] = 97; });  // "a"'s id
  EXPECT_NE(message.find(file + "added token \"<pad>\" has id 97, which the vocabulary gives to \"a\""),
            std::string::npos) << message;
  message = message_of([](nlohmann::json& t) { t["added_tokens"][2]["id"] = 256; });  // "<s>"'s id
  EXPECT_NE(message.find("added tokens \"<s>\" and \"<pad>\" share id 256"), std::string::npos) << message;
  message = message_of([](nlohmann::json& t) { t["post_processor"]["special_tokens"]["<s>"]["ids"][0] = -1; });
  EXPECT_NE(message.find("post-processor special token \"<s>\" has id -1"), std::string::npos) << message;
}

TEST_F(DataPipeline, FormatIsDetectedFromTheFirstRecord) {
  data_.path = write("a.jsonl", "\n{\"instruction\": \"i\", \"output\": \"o\"}\n");
  EXPECT_EQ(d::resolve_data_format(data_), superoffload::config::DataFormat::alpaca);
  data_.path = write("t.jsonl", "{\"text\": \"t\"}\n");
  EXPECT_EQ(d::resolve_data_format(data_), superoffload::config::DataFormat::jsonl);
  data_.path = write("x.jsonl", "{\"prompt\": \"t\"}\n");
  EXPECT_THROW(d::resolve_data_format(data_), superoffload::Error);
  data_.path = "whatever.h5";
  EXPECT_EQ(d::resolve_data_format(data_), superoffload::config::DataFormat::hdf5);
}

}  // namespace
