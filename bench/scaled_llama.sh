# Sourced by the benchmark scripts: the demo model's tokenizer with a Llama scaled to the
# wanted size (heads of 128, at most 4 key/value heads, intermediate 2.7 × hidden), and a
# generated corpus long enough for the run. Both engines of a comparison read the same
# config.json, so they train the same model.
#
#   scaled_llama DIR HIDDEN LAYERS SEQ TOKENS BUILD
# writes DIR/config.json (+ the tokenizer files) and DIR/corpus.jsonl.
scaled_llama() {
  local dir=$1 hidden=$2 layers=$3 seq=$4 tokens=$5 build=$6
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  mkdir -p "$dir"
  cp "$here"/configs/models/tiny-llama/* "$dir/"
  sed -i -E "s/\"hidden_size\": [0-9]+/\"hidden_size\": $hidden/; s/\"intermediate_size\": [0-9]+/\"intermediate_size\": $((hidden * 27 / 10))/;
    s/\"num_hidden_layers\": [0-9]+/\"num_hidden_layers\": $layers/; s/\"num_attention_heads\": [0-9]+/\"num_attention_heads\": $((hidden / 128))/;
    s/\"num_key_value_heads\": [0-9]+/\"num_key_value_heads\": $(( hidden / 128 < 4 ? hidden / 128 : 4 ))/; s/\"head_dim\": [0-9]+/\"head_dim\": 128/;
    s/\"max_position_embeddings\": [0-9]+/\"max_position_embeddings\": $((seq > 4096 ? seq : 4096))/" "$dir/config.json"
  "$build/bin/superoffload_demo_corpus" "$dir/corpus.jsonl" --tokens "$tokens" > /dev/null
}
