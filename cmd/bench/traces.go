package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// traceTemplate is one pre-encoded ExportTraceServiceRequest. Every span's
// trace id ends in idMarker; patch overwrites those 8 bytes with a send
// sequence number, so each send carries new (trace_id, span_id) keys
// without re-encoding and the client stays cheap. It also moves every
// span's timestamps by the time since the template was built, so spans
// start seconds before they are sent, as an SDK's batch processor sends
// them: stored spans follow the clock, and the assembler's reads (bounded
// by the new traces' starts) cost what live traffic costs.
type traceTemplate struct {
	body     []byte
	idPos    []int // offsets of the patchable 8 bytes of every span's trace_id
	timePos  []int // offsets of every span's start and end (fixed64)
	built    time.Time
	spans    int
	requests int
}

const idMarker = "\xfe\xed\xfa\xce\xfe\xed\xfa\xce"

// patch copies the template into dst with every trace id made unique to
// seq and every timestamp moved forward by the time since it was built
// (as of now).
func (t *traceTemplate) patch(dst []byte, seq uint64, now time.Time) []byte {
	dst = append(dst[:0], t.body...)
	for _, p := range t.idPos {
		binary.BigEndian.PutUint64(dst[p:], seq)
	}
	shift := uint64(max(now.Sub(t.built), 0))
	for _, p := range t.timePos {
		binary.LittleEndian.PutUint64(dst[p:], binary.LittleEndian.Uint64(dst[p:])+shift)
	}
	return dst
}

// buildTemplates makes n export requests of about spansPerBatch spans each
// (4 spans per LLM request: root, retrieval, LLM client, vLLM server),
// with request starts spread over the half minute before base.
func buildTemplates(n, spansPerBatch int, seed uint64, base time.Time) ([]*traceTemplate, error) {
	reqs := max(spansPerBatch/4, 1)
	w := newWorld(seed, time.Time{}, time.Time{})
	out := make([]*traceTemplate, 0, n)
	for i := 0; i < n; i++ {
		app := apps[i%len(apps)]
		var samples []sample
		for len(samples) < reqs {
			// Every request of one export comes from one app pod, as an
			// SDK exporter sends it; the collector adds the vLLM side.
			s := w.draw(base.Add(-time.Duration(w.rng.IntN(30_000))*time.Millisecond), true)
			if s.app != app {
				continue
			}
			samples = append(samples, s)
		}
		t, err := encodeTemplate(w.rng, app, samples)
		t.built = base
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func encodeTemplate(rng *rand.Rand, app *appService, samples []sample) (*traceTemplate, error) {
	pod := app.service + "-7d9f8c6b5-" + randomHex(rng, 3)
	appRS := &tracepb.ResourceSpans{
		Resource:  &resourcepb.Resource{Attributes: appResource(rng, app, pod)},
		SchemaUrl: "https://opentelemetry.io/schemas/1.27.0",
	}
	appScope := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "opentelemetry.instrumentation.fastapi", Version: "0.49b2"}}
	llmScope := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "opentelemetry.instrumentation.openai_v2", Version: "2.1b0"}}
	appRS.ScopeSpans = []*tracepb.ScopeSpans{appScope, llmScope}
	servers := map[string]*tracepb.ScopeSpans{}
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{appRS}}
	spans := 0
	for _, s := range samples {
		traceID := make([]byte, 16)
		for j := 0; j < 8; j++ {
			traceID[j] = byte(rng.Uint32())
		}
		copy(traceID[8:], idMarker)
		root, retrieval, client, server := spanID(rng), spanID(rng), spanID(rng), spanID(rng)
		t0 := s.start
		tLLM := t0.Add(msDuration(s.preMs))
		tEnd := tLLM.Add(msDuration(s.e2eMs))
		status := &tracepb.Status{}
		if s.failed {
			status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "upstream returned 500: CUDA out of memory"}
		}
		appScope.Spans = append(appScope.Spans,
			&tracepb.Span{TraceId: traceID, SpanId: root, Name: "POST " + app.route, Kind: tracepb.Span_SPAN_KIND_SERVER,
				StartTimeUnixNano: nanos(t0), EndTimeUnixNano: nanos(tEnd.Add(12 * time.Millisecond)),
				Attributes: rootAttributes(rng, app, s), Status: status},
			&tracepb.Span{TraceId: traceID, SpanId: retrieval, ParentSpanId: root, Name: "qdrant.search", Kind: tracepb.Span_SPAN_KIND_CLIENT,
				StartTimeUnixNano: nanos(t0.Add(2 * time.Millisecond)), EndTimeUnixNano: nanos(tLLM.Add(-time.Millisecond)),
				Attributes: retrievalAttributes(rng, s)})
		llmScope.Spans = append(llmScope.Spans,
			&tracepb.Span{TraceId: traceID, SpanId: client, ParentSpanId: root, Name: "chat " + s.backend.model, Kind: tracepb.Span_SPAN_KIND_CLIENT,
				StartTimeUnixNano: nanos(tLLM), EndTimeUnixNano: nanos(tEnd), Attributes: clientAttributes(rng, s), Status: status})
		sc := servers[s.instance]
		if sc == nil {
			sc = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "vllm.llm_engine", Version: "0.8.5"}}
			servers[s.instance] = sc
			req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
				Resource:   &resourcepb.Resource{Attributes: serverResource(rng, s.backend, s.instance)},
				ScopeSpans: []*tracepb.ScopeSpans{sc}, SchemaUrl: "https://opentelemetry.io/schemas/1.27.0"})
		}
		sStart := tLLM.Add(msDuration(s.networkMs/2 + s.coldWaitMs))
		sc.Spans = append(sc.Spans, &tracepb.Span{TraceId: traceID, SpanId: server, ParentSpanId: client, Name: "llm_request",
			Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: nanos(sStart),
			EndTimeUnixNano: nanos(sStart.Add(msDuration(s.queueMs + s.prefillMs + s.decodeMs))),
			Attributes:      serverAttributes(rng, s)})
		spans += 4
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode template: %w", err)
	}
	t := &traceTemplate{body: body, spans: spans, requests: len(samples)}
	for off := 0; ; {
		i := bytes.Index(body[off:], []byte(idMarker))
		if i < 0 {
			break
		}
		t.idPos = append(t.idPos, off+i)
		off += i + len(idMarker)
	}
	if len(t.idPos) != spans {
		return nil, fmt.Errorf("template: found %d trace id markers for %d spans", len(t.idPos), spans)
	}
	if t.timePos, err = spanTimeOffsets(body); err != nil {
		return nil, err
	}
	if len(t.timePos) != 2*spans {
		return nil, fmt.Errorf("template: found %d span timestamps for %d spans", len(t.timePos), spans)
	}
	return t, nil
}

// spanTimeOffsets finds the offsets of every span's start_time_unix_nano
// and end_time_unix_nano (fixed64 fields 7 and 8) in an encoded
// ExportTraceServiceRequest: resource_spans (1) → scope_spans (2) → spans (2).
func spanTimeOffsets(body []byte) ([]int, error) {
	var out []int
	// walk descends through the length-delimited fields path names, then
	// collects the timestamps of the messages it ends in (the spans).
	var walk func(msg []byte, base int, path []protowire.Number) error
	walk = func(msg []byte, base int, path []protowire.Number) error {
		return eachWireField(msg, base, func(num protowire.Number, typ protowire.Type, off int, value []byte) error {
			switch {
			case len(path) > 0 && num == path[0] && typ == protowire.BytesType:
				return walk(value, off, path[1:])
			case len(path) == 0 && (num == 7 || num == 8) && typ == protowire.Fixed64Type:
				out = append(out, off)
			}
			return nil
		})
	}
	return out, walk(body, 0, []protowire.Number{1, 2, 2})
}

// eachWireField calls fn with every field of the encoded message msg: its
// number, wire type, the offset of its value (msg starts at base) and, for
// length-delimited fields, the value's bytes.
func eachWireField(msg []byte, base int, fn func(num protowire.Number, typ protowire.Type, off int, value []byte) error) error {
	for off := 0; off < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[off:])
		if n < 0 {
			return protowire.ParseError(n)
		}
		off += n
		m := protowire.ConsumeFieldValue(num, typ, msg[off:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		var value []byte
		valueOff := off
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(msg[off:])
			value, valueOff = v, off+m-len(v)
		}
		if err := fn(num, typ, base+valueOff, value); err != nil {
			return err
		}
		off += m
	}
	return nil
}

func nanos(t time.Time) uint64 { return uint64(t.UnixNano()) }

func spanID(rng *rand.Rand) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, rng.Uint64()|1)
	return b
}

func kvStr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func kvInt(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func kvFloat(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func kvBool(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

func kvStrs(k string, vs ...string) *commonpb.KeyValue {
	arr := &commonpb.ArrayValue{}
	for _, v := range vs {
		arr.Values = append(arr.Values, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}})
	}
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}}
}

// appResource is what the OTel Python SDK and the k8s attributes processor
// put on an app pod: 21 attributes.
func appResource(rng *rand.Rand, app *appService, pod string) []*commonpb.KeyValue {
	return []*commonpb.KeyValue{
		kvStr("service.name", app.service), kvStr("service.version", "2026.11.3"), kvStr("service.namespace", "acme-ai"),
		kvStr("service.instance.id", pod), kvStr("deployment.environment.name", "production"),
		kvStr("k8s.namespace.name", "apps"), kvStr("k8s.pod.name", pod), kvStr("k8s.pod.uid", uuid(rng)),
		kvStr("k8s.deployment.name", app.service), kvStr("k8s.node.name", "ip-10-0-"+strconv.Itoa(rng.IntN(250))+"-"+strconv.Itoa(rng.IntN(250))+".eu-west-1.compute.internal"),
		kvStr("k8s.cluster.name", "prod-eu-1"), kvStr("host.arch", "amd64"), kvStr("os.type", "linux"), kvInt("process.pid", 1),
		kvStr("process.runtime.name", "CPython"), kvStr("process.runtime.version", "3.12.7"),
		kvStr("telemetry.sdk.name", "opentelemetry"), kvStr("telemetry.sdk.language", "python"), kvStr("telemetry.sdk.version", "1.28.2"),
		kvStr("cloud.provider", "aws"), kvStr("cloud.region", "eu-west-1"),
	}
}

// serverResource is a vLLM pod's resource: 20 attributes.
func serverResource(rng *rand.Rand, b *backend, instance string) []*commonpb.KeyValue {
	return []*commonpb.KeyValue{
		kvStr("service.name", b.service), kvStr("service.version", "0.8.5"), kvStr("service.namespace", "inference"),
		kvStr("service.instance.id", instance), kvStr("deployment.environment.name", "production"),
		kvStr("k8s.namespace.name", "inference"), kvStr("k8s.pod.name", instance), kvStr("k8s.pod.uid", uuid(rng)),
		kvStr("k8s.statefulset.name", b.service), kvStr("k8s.node.name", "gpu-h100-"+strconv.Itoa(rng.IntN(40))+".eu-west-1.compute.internal"),
		kvStr("k8s.cluster.name", "prod-eu-1"), kvStr("host.arch", "amd64"), kvStr("os.type", "linux"), kvInt("process.pid", 7),
		kvStr("process.runtime.name", "CPython"), kvStr("process.runtime.version", "3.12.3"),
		kvStr("telemetry.sdk.name", "opentelemetry"), kvStr("telemetry.sdk.language", "python"), kvStr("telemetry.sdk.version", "1.27.0"),
		kvStr("cloud.region", "eu-west-1"),
	}
}

// rootAttributes: the app's HTTP server span, 22 attributes.
func rootAttributes(rng *rand.Rand, app *appService, s sample) []*commonpb.KeyValue {
	code := int64(200)
	if s.failed {
		code = 502
	}
	return []*commonpb.KeyValue{
		kvStr("http.request.method", "POST"), kvStr("http.route", app.route), kvStr("url.path", app.route), kvStr("url.scheme", "https"),
		kvStr("server.address", "api.acme.ai"), kvInt("server.port", 443), kvStr("client.address", "10.12."+strconv.Itoa(rng.IntN(250))+"."+strconv.Itoa(rng.IntN(250))),
		kvStr("user_agent.original", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15"),
		kvInt("http.response.status_code", code), kvInt("http.request.body.size", int64(200+rng.IntN(4000))),
		kvInt("http.response.body.size", s.outTokens*4), kvStr("network.protocol.version", "1.1"),
		kvStr("app.tenant_id", s.tenant), kvStr("enduser.id", "user-"+randomHex(rng, 4)), kvStr("app.session_id", randomHex(rng, 8)),
		kvStr("app.request_id", uuid(rng)), kvStr("app.feature", "answer"), kvInt("app.conversation.turn", int64(1+rng.IntN(12))),
		kvStr("app.plan", "enterprise"), kvStr("app.region", "eu-west-1"), kvStr("app.experiment", "prompt-v7-b"), kvStr("app.build", "2026.11.3+g4f2a9c1"),
	}
}

// retrievalAttributes: the vector search before the model call, 22 attributes.
func retrievalAttributes(rng *rand.Rand, s sample) []*commonpb.KeyValue {
	return []*commonpb.KeyValue{
		kvStr("db.system.name", "qdrant"), kvStr("db.operation.name", "search"), kvStr("db.collection.name", "docs_"+s.tenant),
		kvStr("db.query.text", `{"vector":"<1536 floats>","limit":8,"with_payload":true,"filter":{"must":[{"key":"tenant","match":{"value":"`+s.tenant+`"}},{"key":"lang","match":{"value":"en"}}]}}`),
		kvStr("server.address", "qdrant.search.svc.cluster.local"), kvInt("server.port", 6334),
		kvStr("network.peer.address", "10.0."+strconv.Itoa(rng.IntN(250))+"."+strconv.Itoa(rng.IntN(250))),
		kvInt("retrieval.top_k", 8), kvInt("retrieval.documents.returned", 8), kvFloat("retrieval.score.max", 0.7+0.3*rng.Float64()),
		kvFloat("retrieval.score.min", 0.3+0.3*rng.Float64()), kvStr("embedding.model", "text-embedding-3-small"),
		kvInt("embedding.dimensions", 1536), kvInt("embedding.input_tokens", int64(10+rng.IntN(80))), kvBool("app.cache.hit", rng.IntN(5) == 0),
		kvStr("app.index.version", "2026-11-28"), kvInt("db.response.returned_rows", 8), kvStr("retrieval.filter", "tenant="+s.tenant+",lang=en"),
		kvBool("retrieval.rerank", true), kvStr("retrieval.rerank.model", "BAAI/bge-reranker-v2-m3"), kvStr("app.tenant_id", s.tenant),
		kvInt("retrieval.latency_budget_ms", 250),
	}
}

// clientAttributes: the OpenAI-compatible client span (GenAI semconv), 23 attributes.
func clientAttributes(rng *rand.Rand, s sample) []*commonpb.KeyValue {
	b := s.backend
	finish := "stop"
	if rng.IntN(20) == 0 {
		finish = "length"
	}
	return []*commonpb.KeyValue{
		kvStr("gen_ai.operation.name", "chat"), kvStr("gen_ai.provider.name", b.provider), kvStr("gen_ai.request.model", b.model),
		kvStr("gen_ai.response.model", b.model), kvInt("gen_ai.request.max_tokens", 1024), kvFloat("gen_ai.request.temperature", 0.2),
		kvFloat("gen_ai.request.top_p", 0.95), kvBool("gen_ai.request.stream", true), kvInt("gen_ai.usage.input_tokens", s.inTokens),
		kvInt("gen_ai.usage.output_tokens", s.outTokens), kvStr("gen_ai.response.id", "chatcmpl-"+randomHex(rng, 12)),
		kvStrs("gen_ai.response.finish_reasons", finish), kvFloat("gen_ai.response.time_to_first_chunk", s.ttftMs/1000),
		kvStr("gen_ai.conversation.id", randomHex(rng, 8)), kvStr("gen_ai.output.type", "text"),
		kvStr("server.address", b.service+".inference.svc.cluster.local"), kvInt("server.port", 8000), kvStr("http.request.method", "POST"),
		kvStr("url.full", "http://"+b.service+".inference.svc.cluster.local:8000/v1/chat/completions"), kvInt("http.response.status_code", 200),
		kvStr("app.prompt.template", "rag_answer"), kvStr("app.prompt.version", "v12"), kvStr("app.tenant_id", s.tenant),
	}
}

// serverAttributes: vLLM's llm_request span (vllm/tracing.py), 21 attributes.
func serverAttributes(rng *rand.Rand, s sample) []*commonpb.KeyValue {
	b := s.backend
	sec := func(ms float64) float64 { return ms / 1000 }
	serverTTFT := s.queueMs + s.prefillMs
	return []*commonpb.KeyValue{
		kvStr("gen_ai.request.id", "chatcmpl-"+randomHex(rng, 12)), kvStr("gen_ai.request.model", b.model), kvStr("gen_ai.response.model", b.model),
		kvInt("gen_ai.request.max_tokens", 1024), kvFloat("gen_ai.request.temperature", 0.2), kvFloat("gen_ai.request.top_p", 0.95),
		kvInt("gen_ai.request.n", 1), kvInt("gen_ai.request.best_of", 1), kvInt("gen_ai.usage.num_sequences", 1),
		kvInt("gen_ai.usage.prompt_tokens", s.inTokens), kvInt("gen_ai.usage.completion_tokens", s.outTokens),
		kvFloat("gen_ai.latency.time_in_queue", sec(s.queueMs)), kvFloat("gen_ai.latency.time_to_first_token", sec(serverTTFT)),
		kvFloat("gen_ai.latency.e2e", sec(serverTTFT+s.decodeMs)), kvFloat("gen_ai.latency.time_in_scheduler", sec(s.queueMs*0.02)),
		kvFloat("gen_ai.latency.time_in_model_forward", sec((s.prefillMs+s.decodeMs)*0.9)),
		kvFloat("gen_ai.latency.time_in_model_execute", sec((s.prefillMs+s.decodeMs)*0.95)),
		kvFloat("gen_ai.latency.time_in_model_prefill", sec(s.prefillMs)), kvFloat("gen_ai.latency.time_in_model_decode", sec(s.decodeMs)),
		kvFloat("gen_ai.latency.time_in_model_inference", sec(s.prefillMs+s.decodeMs)), kvStrs("gen_ai.response.finish_reasons", "stop"),
	}
}

func uuid(rng *rand.Rand) string {
	h := randomHex(rng, 16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
