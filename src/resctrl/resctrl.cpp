// Reading the resctrl tree: the mount table, info/, the root schemata.
#include "resctrl/resctrl.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace superoffload::resctrl {
namespace {

namespace fs = std::filesystem;

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t\r\n") + 1 - begin);
}

// The mount table escapes blanks and backslashes in paths as three octal digits ("\040").
std::string unescape_mount_path(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '\\' && i + 3 < path.size() &&
        std::all_of(path.begin() + static_cast<std::ptrdiff_t>(i) + 1, path.begin() + static_cast<std::ptrdiff_t>(i) + 4,
                    [](char c) { return c >= '0' && c <= '7'; })) {
      out += static_cast<char>((path[i + 1] - '0') * 64 + (path[i + 2] - '0') * 8 + (path[i + 3] - '0'));
      i += 3;
    } else {
      out += path[i];
    }
  }
  return out;
}

// Reads one info/ value, trimmed; records a problem (relative to the tree) when it cannot.
class TreeReader {
 public:
  explicit TreeReader(std::string root) : root_(std::move(root)) {}

  std::optional<std::string> text(const std::string& relative, bool required = true) {
    std::ifstream in(root_ + "/" + relative);
    if (!in) {
      if (required) problems.push_back(relative + ": missing or unreadable");
      return std::nullopt;
    }
    std::ostringstream content;
    content << in.rdbuf();
    return trim(content.str());
  }

  // A non-negative decimal integer of at most 1e9.
  std::optional<int> integer(const std::string& relative, bool required = true) {
    const auto value = text(relative, required);
    if (!value) return std::nullopt;
    int parsed = 0;
    const auto* end = value->data() + value->size();
    const auto [at, error] = std::from_chars(value->data(), end, parsed);
    if (value->empty() || error != std::errc() || at != end || parsed < 0 || parsed > 1'000'000'000) {
      problems.push_back(relative + ": not a count ('" + value->substr(0, 40) + "')");
      return std::nullopt;
    }
    return parsed;
  }

  // A hexadecimal mask of at most 64 bits, without "0x".
  std::optional<unsigned long long> mask(const std::string& relative, bool required = true) {
    const auto value = text(relative, required);
    if (!value) return std::nullopt;
    unsigned long long parsed = 0;
    const auto* end = value->data() + value->size();
    const auto [at, error] = std::from_chars(value->data(), end, parsed, 16);
    if (value->empty() || value->size() > 16 || error != std::errc() || at != end) {
      problems.push_back(relative + ": not a hex mask ('" + value->substr(0, 40) + "')");
      return std::nullopt;
    }
    return parsed;
  }

  std::vector<std::string> problems;

 private:
  std::string root_;
};

// The root group's schemata: resource name -> (domain id -> value text), e.g.
// "L3:0=7fff;1=7fff" and "    MB:0=100;1=100" (the kernel pads names to one width).
std::map<std::string, std::map<int, std::string>> parse_schemata(const std::string& text,
                                                                 std::vector<std::string>& problems) {
  std::map<std::string, std::map<int, std::string>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    line = trim(line);
    if (line.empty()) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) {
      problems.push_back("schemata: a line without 'NAME:' ('" + line.substr(0, 40) + "')");
      continue;
    }
    auto& domains = out[trim(line.substr(0, colon))];
    std::istringstream entries(line.substr(colon + 1));
    std::string entry;
    while (std::getline(entries, entry, ';')) {
      const auto equals = entry.find('=');
      int id = -1;
      const std::string id_text = trim(entry.substr(0, equals));
      const auto [at, error] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
      if (equals == std::string::npos || id_text.empty() || error != std::errc() ||
          at != id_text.data() + id_text.size() || id < 0) {
        problems.push_back("schemata: a malformed domain entry ('" + entry.substr(0, 40) + "')");
        continue;
      }
      domains[id] = trim(entry.substr(equals + 1));
    }
  }
  return out;
}

std::vector<int> domain_ids(const std::map<int, std::string>& domains) {
  std::vector<int> ids;
  for (const auto& [id, value] : domains) ids.push_back(id);
  return ids;
}

std::string join(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

bool Monitoring::has(const std::string& feature) const {
  return std::find(features.begin(), features.end(), feature) != features.end();
}

int Resctrl::control_groups() const {
  int fewest = 0;
  auto take = [&](int n) {
    if (n > 0) fewest = fewest == 0 ? n : std::min(fewest, n);
  };
  for (const auto& c : caches) take(c.control_groups);
  for (const auto& b : bandwidth) take(b.control_groups);
  return fewest;
}

std::optional<std::string> find_mount(const std::string& mount_table) {
  std::ifstream in(mount_table);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string device, path, type;
    if (fields >> device >> path >> type && type == "resctrl") return unescape_mount_path(path);
  }
  return std::nullopt;
}

Resctrl read_tree(const std::string& root) {
  Resctrl r;
  r.mount = root;
  TreeReader read(root);
  std::error_code error;
  if (!fs::is_directory(fs::path(root) / "info", error)) {
    r.problems.push_back("info: missing (not a resctrl tree, or no resource is enabled)");
    return r;
  }
  r.writable = ::access(root.c_str(), W_OK) == 0;
  const auto schemata_text = read.text("schemata");
  std::map<std::string, std::map<int, std::string>> schemata;
  if (schemata_text) schemata = parse_schemata(*schemata_text, read.problems);

  std::vector<std::string> names;
  for (fs::directory_iterator it(fs::path(root) / "info", error), end; !error && it != end; it.increment(error)) {
    if (it->is_directory(error)) names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    const std::string info = "info/" + name + "/";
    const auto in_schemata = schemata.find(name);
    if (fs::exists(fs::path(root) / (info + "cbm_mask"), error)) {
      CacheResource c;
      c.name = name;
      const auto full = read.mask(info + "cbm_mask");
      const auto min_bits = read.integer(info + "min_cbm_bits");
      const auto closids = read.integer(info + "num_closids");
      if (!full || !min_bits || !closids) continue;
      // The full mask is every way of the cache: ones from bit 0 up.
      if (*full == 0 || (*full & (*full + 1)) != 0) {
        std::ostringstream hex;
        hex << std::hex << *full;
        read.problems.push_back(info + "cbm_mask: not a run of ones from bit 0 (" + hex.str() + ")");
        continue;
      }
      c.mask_bits = 64 - __builtin_clzll(*full);
      // 0 on AMD, whose masks may be empty.
      if (*min_bits > c.mask_bits) {
        read.problems.push_back(info + "min_cbm_bits: " + std::to_string(*min_bits) + " above the mask's " +
                                std::to_string(c.mask_bits) + " bits");
        continue;
      }
      c.min_bits = *min_bits;
      c.control_groups = *closids;
      c.sparse_masks = read.integer(info + "sparse_masks", /*required=*/false).value_or(0) == 1;
      c.shareable_mask = read.mask(info + "shareable_bits", /*required=*/false).value_or(0);
      if (in_schemata != schemata.end()) c.domains = domain_ids(in_schemata->second);
      r.caches.push_back(c);
    } else if (fs::exists(fs::path(root) / (info + "bandwidth_gran"), error)) {
      BandwidthResource b;
      b.name = name;
      const auto granularity = read.integer(info + "bandwidth_gran");
      const auto min = read.integer(info + "min_bandwidth");
      const auto closids = read.integer(info + "num_closids");
      if (!granularity || !min || !closids) continue;
      if (*granularity < 1) {
        read.problems.push_back(info + "bandwidth_gran: 0");
        continue;
      }
      b.granularity = *granularity;
      b.min = *min;
      b.control_groups = *closids;
      b.linear = read.integer(info + "delay_linear", /*required=*/false).value_or(1) == 1;
      if (in_schemata != schemata.end()) {
        b.domains = domain_ids(in_schemata->second);
        // The root group holds the whole bandwidth: its value is the top of the scale (100
        // percent; AMD counts in 1/8 GB/s units up to 2048; a mount with mba_MBps in MB/s).
        long long top = 0;
        for (const auto& [id, value] : in_schemata->second) {
          long long v = 0;
          const auto [at, err] = std::from_chars(value.data(), value.data() + value.size(), v);
          if (err == std::errc() && at == value.data() + value.size() && v > 0) top = std::max(top, v);
        }
        // Mounted with mba_MBps, the root group reads the "unlimited" value (2^32 - 1 MB/s): no
        // top to take a share of.
        if (top > 1'000'000) {
          read.problems.push_back("schemata: " + name + " in MB/s without an upper value (mba_MBps): no share of it "
                                  "can be set");
          continue;
        }
        if (top > 0) b.max = static_cast<int>(top);
      }
      if (b.min > b.max) {
        read.problems.push_back(info + "min_bandwidth: " + std::to_string(b.min) + " above the root group's " +
                                std::to_string(b.max));
        continue;
      }
      r.bandwidth.push_back(b);
    } else if (name == "L3_MON") {
      Monitoring m;
      const auto counters = read.integer(info + "num_rmids");
      const auto features = read.text(info + "mon_features");
      if (!counters || !features) continue;
      m.counters = *counters;
      std::istringstream words(*features);
      for (std::string w; words >> w;) m.features.push_back(w);
      r.monitoring = m;
    }
  }
  r.problems = std::move(read.problems);
  return r;
}

Resctrl detect(const std::string& mount_table) {
  const auto mount = find_mount(mount_table);
  if (!mount) return Resctrl{};
  return read_tree(*mount);
}

std::string describe(const Resctrl& r) {
  if (!r.mounted()) {
    return "resctrl: not mounted (no resctrl file system in the mount table): no cache or memory-bandwidth "
           "partitioning or monitoring (Intel RDT, AMD PQoS, Arm MPAM)";
  }
  std::ostringstream out;
  out << "resctrl at " << r.mount << " (" << (r.writable ? "writable" : "read-only") << ")";
  if (r.caches.empty() && r.bandwidth.empty() && !r.monitoring) out << ": no usable resource";
  const char* separator = ": ";
  for (const auto& c : r.caches) {
    out << separator << c.name << " " << c.mask_bits << "-bit masks, "
        << (c.min_bits == 0 ? std::string("empty allowed")
                            : "at least " + std::to_string(c.min_bits) + " bit" + (c.min_bits == 1 ? "" : "s"))
        << ", " << (c.sparse_masks ? "sparse allowed" : "contiguous") << ", domains " << join(c.domains);
    separator = "; ";
  }
  for (const auto& b : r.bandwidth) {
    out << separator << b.name << " " << b.min << "-" << b.max << " in steps of " << b.granularity
        << (b.linear ? "" : " (non-linear)") << ", domains " << join(b.domains);
    separator = "; ";
  }
  if (r.control_groups() > 0) out << separator << r.control_groups() << " control groups";
  if (r.monitoring) {
    out << "; monitoring";
    for (const auto& f : r.monitoring->features) out << " " << f;
    out << " (" << r.monitoring->counters << " counters)";
  } else {
    out << "; no monitoring";
  }
  if (!r.problems.empty()) {
    out << "; " << r.problems.size() << " problem(s): " << r.problems.front();
    if (r.problems.size() > 1) out << ", ...";
  }
  return out.str();
}

}  // namespace superoffload::resctrl
