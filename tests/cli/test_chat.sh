#!/usr/bin/env bash
# Chat records (#34) through `prepare` and `train`, against HF transformers: for the demo
# model's own chat template and the seven reference template shapes of tests/jinja/templates, every record
# the template accepts becomes exactly the token ids and assistant mask of
# tokenizer.apply_chat_template(..., return_assistant_tokens_mask=True); for a template
# without {% generation %} blocks, the prefix rule equals the same rule computed in Python
# with HF's rendering and offset mapping. Records a template refuses (raise_exception) are
# skipped and counted; ShareGPT records map to the same conversations; train runs on chat
# records with train_on = "assistant" and "all".
source "$(dirname "$0")/lib.sh"
cd "$SO_SOURCE_DIR"

"$SO_PYTHON" - "$tmp/chat.jsonl" <<'PY'
import json, random, sys
rng = random.Random(34)
words = "the fox owl cat runs jumps over a lazy dog and sleeps under tree in park naïve café ✓".split()
say = lambda: " ".join(rng.choice(words) for _ in range(rng.randrange(2, 14)))
with open(sys.argv[1], "w") as f:
    for i in range(40):
        turns = []
        if i % 4 == 0:
            turns.append({"role": "system", "content": "Answer briefly. " + say()})
        for _ in range(rng.randrange(1, 4)):
            turns += [{"role": "user", "content": " " + say() + "?"}, {"role": "assistant", "content": say() + ". "}]
        if i % 5 == 2:  # reasoning fields as Seed-OSS (reasoning_content) and GPT-OSS (thinking) records carry them
            turns[-1]["reasoning_content"] = turns[-1]["thinking"] = say()
        if i % 3 == 1:  # ShareGPT
            speaker = {"system": "system", "user": "human", "assistant": "gpt"}
            f.write(json.dumps({"conversations": [{"from": speaker[t["role"]], "value": t["content"]} for t in turns]},
                               ensure_ascii=False) + "\n")
        else:
            f.write(json.dumps({"messages": turns}, ensure_ascii=False) + "\n")
PY
# The demo template without its generation marks: assistant bytes by the prefix rule.
sed -e 's/{%- generation %}//' -e 's/{%- endgeneration %}//' configs/models/tiny-llama/chat_template.jinja > "$tmp/prefix.jinja"

common=(configs/tiny.toml --set data.path="$tmp/chat.jsonl" --set data.seq_len=2047)
for case in own llama3 chatml phi4 harmony seed_oss mistral gemma prefix; do
  case $case in
    own) template=() ;;
    prefix) template=(--set data.chat_template="$tmp/prefix.jinja") ;;
    *) template=(--set data.chat_template=tests/jinja/templates/$case.jinja) ;;
  esac
  out=$("$MPIEXEC" -np 2 "$SO_BIN" prepare "${common[@]}" "${template[@]}" --output "$tmp/$case.h5" 2>&1) \
    || fail "prepare with the $case template: $out"
  expect_contains "$out" "(chat)" "the chat format detected"
  if [[ $case == own ]]; then  # what is trained on, as a user sees it
    shown=$("$MPIEXEC" -np 1 "$SO_BIN" prepare "${common[@]}" --output "$tmp/shown.h5" --show 2 2>&1) || fail "--show: $shown"
    expect_contains "$shown" "---- sample 1" "prepare --show 2"
    grep -qE '^<s>(system|user):' <<< "$shown" || fail "--show: no prompt text before the trained span: $shown"
    grep -qE '<s>assistant:.\[\[[^]]+</s>\]\]' <<< "$(tr '\n' '.' <<< "$shown")" \
      || fail "--show: the assistant turn and its </s> are not marked as trained: $shown"
  fi
  [[ $case == gemma ]] && expect_contains "$out" "chat record(s) skipped, not trained on; the first: $tmp/chat.jsonl:1: the chat template refuses it:" \
    "gemma refuses system turns, counted"
done
"$SO_PYTHON" - "$tmp" tests/jinja/templates <<'PY' || fail "chat tokens or masks differ from HF transformers'"
import json, sys, h5py, numpy as np
from transformers import AutoTokenizer
tmp, templates = sys.argv[1], sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained("configs/models/tiny-llama")
records = [json.loads(line) for line in open(f"{tmp}/chat.jsonl")]
roles = {"system": "system", "human": "user", "gpt": "assistant"}
conversations = [r["messages"] if "messages" in r else
                 [{"role": roles[t["from"]], "content": t["value"]} for t in r["conversations"]] for r in records]

def prefix_rule(messages, template):
    render = lambda m, prompt: tokenizer.apply_chat_template(m, chat_template=template, tokenize=False,
                                                             add_generation_prompt=prompt)
    text = render(messages, False)
    spans = [(len(render(messages[:i], True)), len(render(messages[:i + 1], False)))
             for i, m in enumerate(messages) if m["role"] == "assistant"]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(a < e and b > s for s, e in spans)) for a, b in encoded["offset_mapping"]]
    return encoded["input_ids"], mask

for case in ("own", "llama3", "chatml", "phi4", "harmony", "seed_oss", "mistral", "gemma", "prefix"):
    if case == "own":
        template = None  # the model directory's chat_template.jinja
    elif case == "prefix":
        template = open(f"{tmp}/prefix.jinja").read()
    else:
        template = open(f"{templates}/{case}.jinja").read()
    f = h5py.File(f"{tmp}/{case}.h5", "r")
    rows, masks = f["tokens"][...], f["loss_mask"][...]
    row, compared = 0, 0
    for messages in conversations:
        if case == "prefix":
            ids, mask = prefix_rule(messages, template)
        else:
            try:
                out = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=True,
                                                    return_assistant_tokens_mask=True)
            except Exception as e:  # the template refuses the conversation: skipped by ours too
                assert "System role not supported" in str(e), e
                continue
            ids, mask = out["input_ids"], out["assistant_masks"]
        n = len(ids)
        assert rows[row][:n].tolist() == ids, f"{case}, row {row}: tokens\n{rows[row][:n].tolist()}\n{ids}"
        assert masks[row][:n].tolist() == mask, f"{case}, row {row}: mask\n{masks[row][:n].tolist()}\n{mask}"
        assert sum(mask) > 0
        row += 1
        compared += 1
    assert row == rows.shape[0], (case, row, rows.shape)
    print(f"{case}: {compared} conversations, tokens and assistant masks equal to HF transformers'")
PY
# A tokenizer with merges (trained here with HF tokenizers) and a template whose generation
# block begins inside a word: the token that straddles the edge carries loss, as HF's
# char_to_token marking gives it (no record skipped).
"$SO_PYTHON" - "$tmp/chat.jsonl" "$tmp/bpe" <<'PY' || fail "training the BPE tokenizer"
import json, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
texts = [m["content"] if "messages" in r else m["value"] for r in map(json.loads, open(sys.argv[1]))
         for m in r.get("messages", r.get("conversations", []))]
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.train_from_iterator(texts * 20, trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"],
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
os.makedirs(sys.argv[2], exist_ok=True)
tokenizer.save(f"{sys.argv[2]}/tokenizer.json")
json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "tokenizer_class": "PreTrainedTokenizerFast"},
          open(f"{sys.argv[2]}/tokenizer_config.json", "w"))
PY
cat > "$tmp/midword.jinja" <<'JINJA'
{%- for m in messages %}{{ bos_token }}{{ m.role }}: {% if m.role == 'assistant' %}{{ m.content[:2] }}{% generation %}{{ m.content[2:] }}{{ eos_token }}{% endgeneration %}{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}
JINJA
out=$("$MPIEXEC" -np 2 "$SO_BIN" prepare "${common[@]}" --set data.tokenizer="$tmp/bpe" --set data.chat_template="$tmp/midword.jinja" \
      --output "$tmp/midword.h5" 2>&1) || fail "prepare with a merges tokenizer: $out"
grep -q "chat record(s) skipped" <<< "$out" && fail "a record was skipped for an edge inside a token: $out"
"$SO_PYTHON" - "$tmp" <<'PY' || fail "tokens or masks differ from HF's where an assistant edge falls inside a token"
import json, sys, h5py
from transformers import AutoTokenizer
tmp = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(f"{tmp}/bpe")
template = open(f"{tmp}/midword.jinja").read()
roles = {"system": "system", "human": "user", "gpt": "assistant"}
records = [json.loads(line) for line in open(f"{tmp}/chat.jsonl")]
f = h5py.File(f"{tmp}/midword.h5", "r")
rows, masks = f["tokens"][...], f["loss_mask"][...]
straddling = 0
for row, r in enumerate(records):
    messages = r["messages"] if "messages" in r else [{"role": roles[t["from"]], "content": t["value"]} for t in r["conversations"]]
    out = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert rows[row][:len(ids)].tolist() == ids, f"row {row}: tokens"
    assert masks[row][:len(ids)].tolist() == mask, f"row {row}: mask\n{masks[row][:len(ids)].tolist()}\n{mask}"
    text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    edges, at = [], 0  # where each generation block begins: two characters into an assistant turn
    for m in messages:
        at = text.index(m["content"], at)
        if m["role"] == "assistant":
            edges.append(at + 2)
        at += len(m["content"])
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    straddling += sum(1 for a, b in offsets for e in edges if a < e < b)
assert straddling > 0, "no token straddled an assistant edge: the case tests nothing"
print(f"midword: {len(records)} conversations equal to HF's, {straddling} tokens straddling an edge")
PY
for train_on in assistant all; do
  train_tiny "$tmp/train_$train_on" --set data.path="$tmp/chat.jsonl" --set data.seq_len=128 --set training.max_steps=2 \
    --set data.train_on=$train_on --set data.packing=true
  ((rc == 0)) || fail "train on chat records (train_on = $train_on): $log"
  expect_contains "$log" "chat records from $tmp/chat.jsonl" "the data line"
done
echo "chat: prepare equals HF apply_chat_template (ids and assistant masks) for the 7 reference shapes, the demo model's own template and the prefix rule; train runs"
