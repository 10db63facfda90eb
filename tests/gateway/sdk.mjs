// SPDX-License-Identifier: MIT
// bitnet-gateway with the official OpenAI TypeScript SDK as its client (make check-gateway-sdk;
// tests/gateway/run.sh starts the daemon and the gateway and sets the environment):
//   GATEWAY_URL   http://127.0.0.1:PORT/v1
//   API_KEY       a key of the gateway's --api-key-file
//   MODEL_ID      the model `bitnet-cli info` reports
//   SCORE_PROMPT  a text, and SCORE_LOGPROBS the log-probabilities `bitnet-cli score --text`
//                 printed for it (one per scored token, in order)
//   EMBED_SECOND  a second text, and EMBED_VECTORS the vectors `bitnet-cli embed` printed for
//                 SCORE_PROMPT and it (a line of floats each; the daemon runs --pooling mean)
//   TIMEOUT_MS    each call's limit (run.sh: 60 s scaled by tests/timescale.py's rule)
// Prints TAP-like lines and a summary; exits 1 when any case failed.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const sdkVersion = JSON.parse(readFileSync(new URL('./node_modules/openai/package.json',
                                                   import.meta.url))).version;

const client = new OpenAI({ baseURL: process.env.GATEWAY_URL, apiKey: process.env.API_KEY,
                            maxRetries: 0,
                            timeout: Number(process.env.TIMEOUT_MS || 60000) });
const model = process.env.MODEL_ID;
const chatMessages = [{ role: 'system', content: 'You are terse.' },
                      { role: 'user', content: 'Say something about ternary weights.' }];

async function chatText(params) {
  const r = await client.chat.completions.create({ model, messages: chatMessages, ...params });
  return r;
}

const cases = {
  async 'models list names the daemon model'() {
    const list = await client.models.list();
    const ids = [];
    for await (const m of list) ids.push(m.id);
    assert.deepEqual(ids, [model]);
    const one = await client.models.retrieve(model);
    assert.equal(one.id, model);
    assert.equal(one.object, 'model');
  },

  async 'chat streamed equals chat whole'() {
    const whole = await chatText({ max_tokens: 12, temperature: 0 });
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices.length, 1);
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.completion_tokens, 12);
    assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 12);
    const stream = await client.chat.completions.create({
      model, messages: chatMessages, max_tokens: 12, temperature: 0, stream: true,
      stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null, role = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        text += c.delta.content ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.deepEqual(usage, whole.usage);
  },

  async 'chat logprobs with top_logprobs'() {
    const r = await chatText({ max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 2);
      // greedy: the chosen token is the most likely one
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
      assert.deepEqual(Buffer.from(t.bytes).toString('utf8').length >= 0, true);
    }
  },

  async 'completions echo with logprobs equal bitnet-cli score'() {
    const r = await client.completions.create({ model, prompt: process.env.SCORE_PROMPT,
                                                max_tokens: 0, echo: true, logprobs: 1 });
    const c = r.choices[0];
    assert.equal(c.text, process.env.SCORE_PROMPT);
    const want = process.env.SCORE_LOGPROBS.trim().split(/\s+/).map(Number);
    const got = c.logprobs.token_logprobs;
    assert.equal(got[0], null);
    assert.equal(got.length, want.length + 1);
    // both print enough digits to give the float back: the same float, bit for bit
    for (let i = 0; i < want.length; i++)
      assert.equal(Math.fround(got[i + 1]), Math.fround(want[i]), `token ${i + 1}`);
  },

  async 'n = 3 with a seed: each choice is its own seed, again and again'() {
    const params = { model, prompt: 'The weights are', max_tokens: 8, temperature: 1, seed: 42 };
    const a = await client.completions.create({ ...params, n: 3 });
    const b = await client.completions.create({ ...params, n: 3 });
    assert.equal(a.choices.length, 3);
    assert.deepEqual(a.choices.map(c => c.index), [0, 1, 2]);
    assert.deepEqual(a.choices.map(c => c.text), b.choices.map(c => c.text));
    for (let i = 0; i < 3; i++) {
      const one = await client.completions.create({ ...params, seed: 42 + i });
      assert.equal(one.choices[0].text, a.choices[i].text);
    }
  },

  async 'stop strings end the text before them'() {
    const full = await client.completions.create({ model, prompt: 'The weights are',
                                                   max_tokens: 24, temperature: 0 });
    const text = full.choices[0].text;
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
    assert.ok(stop.length === 3, `a stop string from: ${JSON.stringify(text)}`);
    const cut = await client.completions.create({ model, prompt: 'The weights are',
                                                  max_tokens: 24, temperature: 0, stop: [stop] });
    assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(cut.choices[0].finish_reason, 'stop');
  },

  async 'parse() with a json_schema response_format gives message.parsed'() {
    const schema = { type: 'object', additionalProperties: false, required: ['name', 'age'],
                     properties: { name: { type: 'string', maxLength: 10 },
                                   age: { type: 'integer', minimum: 0, maximum: 120 } } };
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.parse({
        model, messages: chatMessages, max_tokens: 64, temperature: 1, seed,
        response_format: { type: 'json_schema',
                           json_schema: { name: 'person', strict: true, schema } } });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'stop');
      assert.deepEqual(Object.keys(m.parsed), ['name', 'age']);
      assert.equal(typeof m.parsed.name, 'string');
      assert.ok(m.parsed.name.length <= 10);
      assert.ok(Number.isInteger(m.parsed.age) && m.parsed.age >= 0 && m.parsed.age <= 120);
    }
    const r = await client.completions.create({ model, prompt: 'JSON:', max_tokens: 32,
                                                response_format: { type: 'json_object' } });
    assert.equal(typeof JSON.parse(r.choices[0].text), 'object');
  },

  async 'tool calls: named, required, streamed, and the result sent back'() {
    const tools = [
      { type: 'function', function: { name: 'add', description: 'Adds two integers', strict: true,
        parameters: { type: 'object', additionalProperties: false, required: ['a', 'b'],
                      properties: { a: { type: 'integer', maximum: 999 },
                                    b: { type: 'integer', minimum: -999 } } } } },
      { type: 'function', function: { name: 'lookup', strict: true,
        parameters: { type: 'object', additionalProperties: false, required: ['word'],
                      properties: { word: { type: 'string', maxLength: 12 } } } } }];
    const named = await client.chat.completions.parse({
      model, messages: chatMessages, tools, max_tokens: 48, temperature: 0,
      tool_choice: { type: 'function', function: { name: 'add' } } });
    const c = named.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(call.id.startsWith('call_'));
    assert.equal(call.function.name, 'add');
    assert.deepEqual(Object.keys(call.function.parsed_arguments), ['a', 'b']);
    assert.ok(Number.isInteger(call.function.parsed_arguments.a));

    const required = await client.chat.completions.parse({
      model, messages: chatMessages, tools, max_tokens: 48, temperature: 1, seed: 4, n: 4,
      tool_choice: 'required' });
    for (const ch of required.choices) {
      const tc = ch.message.tool_calls[0];
      assert.ok(['add', 'lookup'].includes(tc.function.name), tc.function.name);
      assert.deepEqual(Object.keys(tc.function.parsed_arguments),
                       tc.function.name === 'add' ? ['a', 'b'] : ['word']);
    }

    // the SDK's stream helper puts the streamed call back together: the whole answer's call
    const stream = client.chat.completions.stream({
      model, messages: chatMessages, tools, max_tokens: 48, temperature: 0,
      tool_choice: { type: 'function', function: { name: 'add' } } });
    const final = await stream.finalChatCompletion();
    const sc = final.choices[0];
    assert.equal(sc.finish_reason, 'tool_calls');
    assert.equal(sc.message.tool_calls[0].function.name, 'add');
    assert.equal(sc.message.tool_calls[0].function.arguments, call.function.arguments);

    const back = await client.chat.completions.create({
      model, max_tokens: 8, temperature: 0,
      messages: [...chatMessages, { role: 'assistant', content: null, tool_calls: [
                   { id: call.id, type: 'function',
                     function: { name: 'add', arguments: call.function.arguments } }] },
                 { role: 'tool', tool_call_id: call.id, content: '42' }] });
    assert.equal(typeof back.choices[0].message.content, 'string');
    assert.ok(back.usage.prompt_tokens > named.usage.prompt_tokens / 4);

    await assert.rejects(client.chat.completions.create({ model, messages: chatMessages, tools }),
      (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.param, 'tool_choice');
        assert.match(e.message, /required/);
        return true;
      });
  },

  async 'embeddings.create: floats and base64, each the ring\'s vector'() {
    const input = [process.env.SCORE_PROMPT, process.env.EMBED_SECOND];
    const want = process.env.EMBED_VECTORS.trim().split('\n').map(l => l.trim().split(/\s+/).map(Number));
    assert.equal(want.length, 2);
    const same = (got, w, what) => {
      assert.equal(got.length, w.length, what);
      for (let i = 0; i < w.length; i++)
        assert.equal(Math.fround(got[i]), Math.fround(w[i]), `${what} [${i}]`);
    };
    // float: the JSON numbers; the SDK's default asks for base64 and decodes it itself
    const f = await client.embeddings.create({ model, input, encoding_format: 'float' });
    const d = await client.embeddings.create({ model, input });
    assert.equal(f.object, 'list');
    assert.equal(f.model, model);
    assert.deepEqual(f.data.map(e => e.index), [0, 1]);
    for (let k = 0; k < 2; k++) {
      same(f.data[k].embedding, want[k], `float ${k}`);
      same(d.data[k].embedding, want[k], `default ${k}`);
    }
    assert.ok(f.usage.prompt_tokens > 2);
    assert.equal(f.usage.total_tokens, f.usage.prompt_tokens);
    assert.deepEqual(d.usage, f.usage);
    const b = await client.embeddings.create({ model, input: input[0], encoding_format: 'base64' });
    const bytes = Buffer.from(b.data[0].embedding, 'base64');
    same(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4)), want[0], 'base64');
    // token ids, and a generative model's vector cannot be cut short
    const ids = await client.embeddings.create({ model, input: [[1, 2, 3]], encoding_format: 'float' });
    assert.equal(ids.usage.prompt_tokens, 3);
    await assert.rejects(client.embeddings.create({ model, input: 'x', dimensions: 8 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, 'dimensions');
      return true;
    });
    await assert.rejects(client.embeddings.create({ model, input: '' }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, 'input');
      return true;
    });
  },

  async 'a wrong key is an authentication error'() {
    const bad = new OpenAI({ baseURL: process.env.GATEWAY_URL, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
      assert.equal(e.status, 401);
      assert.equal(e.code, 'invalid_api_key');
      return true;
    });
  },

  async 'a bad parameter is a 400 that names it'() {
    await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 5 }),
      (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.status, 400);
        assert.equal(e.param, 'temperature');
        return true;
      });
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4o', messages: chatMessages }),
      (e) => { assert.equal(e.status, 404); assert.equal(e.code, 'model_not_found'); return true; });
  },
};

let failed = 0, n = 0;
for (const [name, fn] of Object.entries(cases)) {
  n++;
  try {
    await fn();
    console.log(`ok ${n} - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok ${n} - ${name}\n  ${String(e && e.stack || e).split('\n').slice(0, 6).join('\n  ')}`);
  }
}
console.log(`sdk: ${n - failed} passed, ${failed} failed (openai ${sdkVersion})`);
process.exit(failed ? 1 : 0);
