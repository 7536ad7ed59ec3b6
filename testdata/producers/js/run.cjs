'use strict';
// Runs one real npm LLM instrumentation against the fake API (fake-llm.cjs)
// and exports its spans over OTLP/HTTP, as an app using that library would.
// Usage: node run.cjs <library>; env FAKE_LLM_URL, OTLP_URL (base, without
// /v1/traces), OTLP_KEY. Prints one JSON line: the library, the packages
// and versions that ran, and the calls made, for the Go test
// (ingest/jsproducers_test.go) to assert and record as provenance.
//
// Every library is set up the way its README tells an app to, before the
// SDK it patches is required (require hooks). Each model call runs inside
// its own root span ("POST /chat", PRE_INFERENCE_MS of app work first),
// so each call is one trace.
const fs = require('node:fs');
const path = require('node:path');
const { trace } = require('@opentelemetry/api');
const { NodeTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-node');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { registerInstrumentations } = require('@opentelemetry/instrumentation');
const ProtoExporter = require('@opentelemetry/exporter-trace-otlp-proto').OTLPTraceExporter;

const FAKE = need('FAKE_LLM_URL');
const OTLP = need('OTLP_URL');
const KEY = need('OTLP_KEY');
const PRE_INFERENCE_MS = 50;
const OPENAI_MODEL = 'gpt-4o-mini';
const ANTHROPIC_MODEL = 'claude-haiku-4-5';
const messages = [{ role: 'user', content: 'Why was the queue full?' }];

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`run.cjs: ${name} is not set`);
  return v;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function protoExporter() {
  return new ProtoExporter({ url: `${OTLP}/v1/traces`, headers: { Authorization: `Bearer ${KEY}` } });
}

// sdkProvider is the app's own OTel SDK setup: a batch processor and the
// protobuf OTLP/HTTP exporter, registered globally.
function sdkProvider(service, processor) {
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': service }),
    spanProcessors: [processor || new BatchSpanProcessor(protoExporter())],
  });
  provider.register();
  return provider;
}

const openaiClient = () => new (require('openai').OpenAI)({ apiKey: 'sk-conformance', baseURL: `${FAKE}/v1`, maxRetries: 0 });
const anthropicClient = () => new (require('@anthropic-ai/sdk').Anthropic)({ apiKey: 'sk-ant-conformance', baseURL: FAKE, maxRetries: 0 });

// libraries: how each one is set up (returns the tracer provider to flush,
// and the clients to call) and the packages whose versions it records.
// `source` is the file whose spans the fixtures show.
const libraries = {
  'otel-openai': {
    packages: ['@opentelemetry/instrumentation-openai', 'openai'],
    source: '@opentelemetry/instrumentation-openai/build/src/instrumentation.js',
    setup(service) {
      const provider = sdkProvider(service);
      const { OpenAIInstrumentation } = require('@opentelemetry/instrumentation-openai');
      registerInstrumentations({ instrumentations: [new OpenAIInstrumentation()] });
      return { provider, openai: openaiClient() };
    },
  },
  openllmetry: {
    // The per-library instrumentations (@traceloop/node-server-sdk 0.27
    // fails at require with @anthropic-ai/sdk 1.x). The Anthropic one patches
    // Anthropic.Completions, which the 1.x SDK no longer has, so it runs on
    // the 0.x SDK (installed as anthropic-sdk-0, hence patched by hand, as
    // Traceloop documents for bundlers).
    packages: ['@traceloop/instrumentation-openai', '@traceloop/instrumentation-anthropic', 'openai', 'anthropic-sdk-0'],
    source: '@traceloop/instrumentation-openai/dist/index.js',
    setup(service) {
      const provider = sdkProvider(service);
      const { OpenAIInstrumentation } = require('@traceloop/instrumentation-openai');
      const { AnthropicInstrumentation } = require('@traceloop/instrumentation-anthropic');
      const anthropicInstrumentation = new AnthropicInstrumentation();
      registerInstrumentations({ instrumentations: [new OpenAIInstrumentation(), anthropicInstrumentation] });
      const sdk0 = require('anthropic-sdk-0');
      anthropicInstrumentation.manuallyInstrument(sdk0);
      return { provider, openai: openaiClient(), anthropic: new sdk0.Anthropic({ apiKey: 'sk-ant-conformance', baseURL: FAKE, maxRetries: 0 }) };
    },
  },
  openinference: {
    packages: ['@arizeai/openinference-instrumentation-openai', 'openai'],
    source: '@arizeai/openinference-instrumentation-openai/dist/src/instrumentation.js',
    setup(service) {
      const provider = sdkProvider(service);
      const { OpenAIInstrumentation } = require('@arizeai/openinference-instrumentation-openai');
      registerInstrumentations({ instrumentations: [new OpenAIInstrumentation()] });
      return { provider, openai: openaiClient() };
    },
  },
  openlit: {
    // OpenLIT builds its own provider and exporter (OTLP/HTTP JSON); metrics
    // and events are off: the suite reads traces.
    packages: ['openlit', 'openai', '@anthropic-ai/sdk'],
    source: 'openlit/dist/instrumentation/openai/wrapper.js',
    setup(service) {
      const openlit = require('openlit').default;
      openlit.init({ applicationName: service, otlpEndpoint: OTLP, otlpHeaders: { Authorization: `Bearer ${KEY}` },
        disableMetrics: true, disableEvents: true,
        // Without it OpenLIT fetches a price list from the internet at init.
        pricingJson: {} });
      return { provider: trace.getTracerProvider().getDelegate(), openai: openaiClient(), anthropic: anthropicClient() };
    },
  },
  langfuse: {
    // Langfuse's span processor with its default filter (it exports only
    // Langfuse and gen_ai spans, so the app's root span is dropped) and a
    // protobuf exporter to Tokenpath in place of Langfuse's endpoint.
    packages: ['@langfuse/otel', '@langfuse/openai', '@langfuse/tracing', 'openai'],
    source: '@langfuse/openai/dist/index.cjs',
    setup(service) {
      const { LangfuseSpanProcessor } = require('@langfuse/otel');
      const provider = sdkProvider(service, new LangfuseSpanProcessor({ exporter: protoExporter() }));
      const { observeOpenAI } = require('@langfuse/openai');
      return { provider, openai: observeOpenAI(openaiClient()) };
    },
  },
  'anthropic-sdk': {
    // No instrumentation library: the Anthropic SDK's own spans, which it
    // emits whenever a global tracer provider is registered.
    packages: ['@anthropic-ai/sdk'],
    source: '@anthropic-ai/sdk/internal/tracing.js',
    setup(service) {
      return { provider: sdkProvider(service), anthropic: anthropicClient() };
    },
  },
};

function version(pkg) {
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

async function drain(stream) {
  for await (const _ of stream) { /* the library sees every chunk */ }
}

async function main() {
  const name = process.argv[2];
  const lib = libraries[name];
  if (!lib) throw new Error(`run.cjs: unknown library ${name}; known: ${Object.keys(libraries).join(', ')}`);
  const service = `js-${name}`;
  const { provider, openai, anthropic } = lib.setup(service);
  const tracer = trace.getTracer('conformance-app');
  const calls = [];
  const call = async (api, stream, model, fn) => {
    await tracer.startActiveSpan('POST /chat', async (root) => {
      await sleep(PRE_INFERENCE_MS);
      await fn();
      root.end();
    });
    calls.push({ api, stream, model });
  };
  if (openai) {
    await call('openai.chat', false, OPENAI_MODEL, () => openai.chat.completions.create({ model: OPENAI_MODEL, messages }));
    await call('openai.chat', true, OPENAI_MODEL, async () =>
      drain(await openai.chat.completions.create({ model: OPENAI_MODEL, messages, stream: true, stream_options: { include_usage: true } })));
  }
  if (anthropic) {
    await call('anthropic.messages', false, ANTHROPIC_MODEL, () => anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 64, messages }));
    await call('anthropic.messages', true, ANTHROPIC_MODEL, async () =>
      drain(await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 64, messages, stream: true })));
  }
  await provider.forceFlush();
  await provider.shutdown();
  const packages = {};
  for (const p of lib.packages) packages[p] = version(p);
  process.stdout.write(JSON.stringify({ library: name, service, packages, source: lib.source, pre_inference_ms: PRE_INFERENCE_MS, calls }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`run.cjs: ${err && err.stack || err}\n`);
  process.exit(1);
});
