'use strict';
// A fake OpenAI + Anthropic API for the JS conformance suite
// (ingest/jsproducers_test.go). It listens on 127.0.0.1 at a random port,
// prints "listening <port>" and exits when its stdin closes, so it never
// outlives the Go test. Every answer has the same known timing, so the
// client TTFT and decode each library reports can be checked against it:
//   response headers HEADER_MS after the request, the first token
//   FIRST_TOKEN_MS after the request, then TOKENS-1 more tokens GAP_MS apart.
// Usage is fixed: INPUT_TOKENS in, TOKENS out, with the detail objects the
// real APIs send.
const http = require('node:http');

const timing = {
  HEADER_MS: 500,
  FIRST_TOKEN_MS: 1200,
  GAP_MS: 200,
  TOKENS: 6,
  INPUT_TOKENS: 37,
  // Of the OpenAI prompt's tokens, this many were a prompt-cache hit
  // (usage.prompt_tokens_details.cached_tokens; prompt_tokens counts them).
  CACHED_TOKENS: 16,
};
const WORDS = ['The', ' queue', ' was', ' full', ' at', ' noon.'];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let seq = 0;

async function readJSON(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
}

// sse writes one server-sent event; OpenAI sends data lines only,
// Anthropic names each event.
function sse(res, data, event) {
  res.write((event ? `event: ${event}\n` : '') + `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
}

async function openaiChat(req, res, body, t0) {
  const id = `chatcmpl-conf${++seq}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model;
  const usage = { prompt_tokens: timing.INPUT_TOKENS, completion_tokens: timing.TOKENS, total_tokens: timing.INPUT_TOKENS + timing.TOKENS,
    prompt_tokens_details: { cached_tokens: timing.CACHED_TOKENS, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
  if (!body.stream) {
    await sleepUntil(t0 + timing.FIRST_TOKEN_MS + (timing.TOKENS - 1) * timing.GAP_MS);
    res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': id });
    res.end(JSON.stringify({
      id, object: 'chat.completion', created, model,
      choices: [{ index: 0, message: { role: 'assistant', content: WORDS.join('') }, finish_reason: 'stop', logprobs: null }],
      usage,
    }));
    return;
  }
  await sleepUntil(t0 + timing.HEADER_MS);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': id });
  res.flushHeaders(); // node holds headers back until the first write otherwise
  const chunk = (delta, finish) => ({ id, object: 'chat.completion.chunk', created, model,
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }] });
  for (let i = 0; i < timing.TOKENS; i++) {
    await sleepUntil(t0 + timing.FIRST_TOKEN_MS + i * timing.GAP_MS);
    sse(res, chunk(i === 0 ? { role: 'assistant', content: WORDS[i] } : { content: WORDS[i] }, null));
  }
  sse(res, chunk({}, 'stop'));
  if (body.stream_options && body.stream_options.include_usage) {
    sse(res, { id, object: 'chat.completion.chunk', created, model, choices: [], usage });
  }
  sse(res, '[DONE]');
  res.end();
}

async function anthropicMessages(req, res, body, t0) {
  const id = `msg_conf${++seq}`;
  const model = body.model;
  const message = (content, stop, outTokens) => ({ id, type: 'message', role: 'assistant', model, content,
    stop_reason: stop, stop_sequence: null,
    usage: { input_tokens: timing.INPUT_TOKENS, output_tokens: outTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 } });
  if (!body.stream) {
    await sleepUntil(t0 + timing.FIRST_TOKEN_MS + (timing.TOKENS - 1) * timing.GAP_MS);
    res.writeHead(200, { 'content-type': 'application/json', 'request-id': `req_conf${seq}` });
    res.end(JSON.stringify(message([{ type: 'text', text: WORDS.join('') }], 'end_turn', timing.TOKENS)));
    return;
  }
  await sleepUntil(t0 + timing.HEADER_MS);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'request-id': `req_conf${seq}` });
  res.flushHeaders();
  // message_start goes with the first token, as the real API sends it once
  // the model has started: it must not read as an early first chunk.
  await sleepUntil(t0 + timing.FIRST_TOKEN_MS);
  sse(res, { type: 'message_start', message: message([], null, 1) }, 'message_start');
  sse(res, { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }, 'content_block_start');
  for (let i = 0; i < timing.TOKENS; i++) {
    await sleepUntil(t0 + timing.FIRST_TOKEN_MS + i * timing.GAP_MS);
    sse(res, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: WORDS[i] } }, 'content_block_delta');
  }
  sse(res, { type: 'content_block_stop', index: 0 }, 'content_block_stop');
  sse(res, { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: timing.TOKENS } }, 'message_delta');
  sse(res, { type: 'message_stop' }, 'message_stop');
  res.end();
}

// sleepUntil keeps every token on the schedule from the request's arrival,
// so a slow timer or write does not add up over the tokens.
function sleepUntil(t) {
  return sleep(Math.max(0, t - Date.now()));
}

const server = http.createServer(async (req, res) => {
  const t0 = Date.now();
  try {
    const body = await readJSON(req);
    const path = new URL(req.url, 'http://x').pathname;
    if (req.method === 'POST' && path.endsWith('/chat/completions')) {
      await openaiChat(req, res, body, t0);
    } else if (req.method === 'POST' && path.endsWith('/messages')) {
      await anthropicMessages(req, res, body, t0);
    } else {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `no fake for ${req.method} ${path}` } }));
    }
  } catch (err) {
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: String(err) } }));
  }
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port} ${JSON.stringify(timing)}\n`);
});
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
