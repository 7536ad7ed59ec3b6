package normalize

import (
	"reflect"
	"strings"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// k8sEventRecord builds a log record the way the OTel Collector's
// k8seventsreceiver does (receiver/k8seventsreceiver/k8s_event_to_logdata.go):
// the involved object on the resource, k8s.event.* on the record, the
// message as the body.
func k8sEventRecord(kind, object, apiVersion, reason, message string, at time.Time) *logspb.ResourceLogs {
	return &logspb.ResourceLogs{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			str("k8s.node.name", ""),
			str("k8s.object.kind", kind),
			str("k8s.object.name", object),
			str("k8s.object.uid", "6f1c2b3a-9d4e-4c1f-8a7b-0e2d3c4b5a69"),
			str("k8s.object.fieldpath", ""),
			str("k8s.object.api_version", apiVersion),
			str("k8s.object.resource_version", "918273"),
		}},
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
			TimeUnixNano:   ns(at),
			SeverityText:   "Normal",
			SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO,
			Body:           sv(message),
			Attributes: []*commonpb.KeyValue{
				str("k8s.event.reason", reason),
				str("k8s.event.action", ""),
				str("k8s.event.start_time", "2026-03-01 11:59:00 +0000 UTC"),
				str("k8s.event.name", object+".1829f3c2a1b4d5e6"),
				str("k8s.event.uid", "0b8e3f4a-1c2d-4e5f-9a8b-7c6d5e4f3a21"),
				str("k8s.namespace.name", "llm"),
				i64("k8s.event.count", 1),
			},
		}}}},
	}
}

func i32(n int32) *int32 { return &n }

func TestLogsEvents(t *testing.T) {
	at := now.Add(-30 * time.Second)
	tests := []struct {
		name string
		rl   *logspb.ResourceLogs
		want *telemetry.Event // nil: ignored
	}{
		{
			name: "HPA SuccessfulRescale",
			rl: k8sEventRecord("HorizontalPodAutoscaler", "vllm", "autoscaling/v2", "SuccessfulRescale",
				"New size: 3; reason: cpu resource utilization (percentage of request) above target", at),
			want: &telemetry.Event{Kind: "scale", Service: "vllm", ToReplicas: i32(3), Reason: "SuccessfulRescale", Source: "hpa"},
		},
		{
			name: "KEDA scale from zero names the Deployment, not the ScaledObject",
			rl: k8sEventRecord("ScaledObject", "vllm-scaler", "keda.sh/v1alpha1", "KEDAScaleTargetActivated",
				"Scaled apps/v1.Deployment llm/vllm from 0 to 1, triggered by s0-prometheus", at),
			want: &telemetry.Event{Kind: "scale", Service: "vllm", FromReplicas: i32(0), ToReplicas: i32(1), Reason: "KEDAScaleTargetActivated", Source: "keda"},
		},
		{
			name: "KEDA scale to zero",
			rl: k8sEventRecord("ScaledObject", "vllm-scaler", "keda.sh/v1alpha1", "KEDAScaleTargetDeactivated",
				"Deactivated apps/v1.Deployment llm/vllm from 2 to 0", at),
			want: &telemetry.Event{Kind: "scale", Service: "vllm", FromReplicas: i32(2), ToReplicas: i32(0), Reason: "KEDAScaleTargetDeactivated", Source: "keda"},
		},
		{
			name: "Knative scale from zero via the revision Deployment",
			rl: k8sEventRecord("Deployment", "llama-00003-deployment", "apps/v1", "ScalingReplicaSet",
				"Scaled up replica set llama-00003-deployment-5d8f9c7b6 to 1 from 0", at),
			want: &telemetry.Event{Kind: "scale", Service: "llama", FromReplicas: i32(0), ToReplicas: i32(1), Reason: "ScalingReplicaSet", Source: "knative"},
		},
		{
			name: "a plain Deployment rollout is a k8s event, not a rescale",
			rl: k8sEventRecord("Deployment", "vllm", "apps/v1", "ScalingReplicaSet",
				"Scaled up replica set vllm-7c9d8b6f5 to 1", at),
			want: &telemetry.Event{Kind: "k8s", Service: "vllm", Reason: "ScalingReplicaSet", Source: "k8s"},
		},
		{
			name: "a Deployment merely named *-deployment is not Knative",
			rl: k8sEventRecord("Deployment", "nginx-deployment", "apps/v1", "ScalingReplicaSet",
				"Scaled up replica set nginx-deployment-66b6c48dd5 to 3 from 1", at),
			want: &telemetry.Event{Kind: "k8s", Service: "nginx-deployment", Reason: "ScalingReplicaSet", Source: "k8s"},
		},
		{
			name: "a failed HPA rescale in a plain log line is ignored",
			rl: &logspb.ResourceLogs{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
				TimeUnixNano: ns(at),
				Body:         sv("Warning  FailedRescale  horizontalpodautoscaler/vllm  New size: 4; reason: ; error: forbidden"),
			}}}}},
		},
		{
			name: "a failed HPA rescale did not change capacity",
			rl: k8sEventRecord("HorizontalPodAutoscaler", "vllm", "autoscaling/v2", "FailedRescale",
				"New size: 4; reason: ; error: deployments/scale.apps \"vllm\" is forbidden", at),
			want: &telemetry.Event{Kind: "k8s", Service: "vllm", Reason: "FailedRescale", Source: "k8s"},
		},
		{
			name: "a pod event names its instance",
			rl:   k8sEventRecord("Pod", "vllm-7c9d8b6f5-x2k4q", "v1", "Started", "Started container vllm", at),
			want: &telemetry.Event{Kind: "k8s", Service: "vllm-7c9d8b6f5-x2k4q", Instance: "vllm-7c9d8b6f5-x2k4q", Reason: "Started", Source: "k8s"},
		},
		{
			name: "another KEDA event keeps its source",
			rl:   k8sEventRecord("ScaledObject", "vllm-scaler", "keda.sh/v1alpha1", "KEDAScalersStarted", "Started scalers watch", at),
			want: &telemetry.Event{Kind: "k8s", Service: "vllm-scaler", Reason: "KEDAScalersStarted", Source: "keda"},
		},
		{
			name: "k8sobjectsreceiver watch body",
			rl: &logspb.ResourceLogs{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
				ObservedTimeUnixNano: ns(at), // the objects receiver stamps only observation
				Body: kvlist(str("type", "ADDED"), kv("object", kvlist(
					str("kind", "Event"),
					str("apiVersion", "v1"),
					kv("metadata", kvlist(str("name", "vllm.1829f3c2a1b4d5e6"), str("namespace", "llm"))),
					kv("involvedObject", kvlist(str("kind", "HorizontalPodAutoscaler"), str("name", "vllm"))),
					str("reason", "SuccessfulRescale"),
					str("message", "New size: 5; reason: external metric vllm:num_requests_waiting above target"),
				))),
			}}}}},
			want: &telemetry.Event{Kind: "scale", Service: "vllm", ToReplicas: i32(5), Reason: "SuccessfulRescale", Source: "hpa"},
		},
		{
			name: "kubectl events line shipped by a file log receiver",
			rl: &logspb.ResourceLogs{
				Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "vllm")}},
				ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
					TimeUnixNano: ns(at),
					Body:         sv("Normal   SuccessfulRescale   horizontalpodautoscaler/vllm   New size: 2; reason: All metrics below target"),
				}}}},
			},
			want: &telemetry.Event{Kind: "scale", Service: "vllm", ToReplicas: i32(2), Reason: "SuccessfulRescale", Source: "hpa"},
		},
		{
			name: "plain application log is ignored",
			rl: &logspb.ResourceLogs{
				Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "chat-api")}},
				ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
					TimeUnixNano: ns(at), SeverityText: "INFO",
					Body:       sv("POST /v1/chat/completions 200 in 1834ms; new size: 3 messages"),
					Attributes: []*commonpb.KeyValue{str("http.route", "/v1/chat/completions")},
				}}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Logs(5, &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{tc.rl}}, now, Limits{})
			if res.Rejected != 0 {
				t.Fatalf("rejected %d: %v", res.Rejected, res.Errors)
			}
			if tc.want == nil {
				if len(res.Events) != 0 {
					t.Fatalf("got events %+v, want none", res.Events)
				}
				return
			}
			if len(res.Events) != 1 {
				t.Fatalf("got %d events, want 1", len(res.Events))
			}
			got := res.Events[0]
			if got.ProjectID != 5 || !got.Time.Equal(at) || got.Attributes["message"] == "" {
				t.Errorf("project=%d time=%v message=%q, want 5, %v and the message kept", got.ProjectID, got.Time, got.Attributes["message"], at)
			}
			got.ProjectID, got.Time, got.Attributes = 0, time.Time{}, nil
			if !reflect.DeepEqual(got, *tc.want) {
				t.Errorf("event\n got %s\nwant %s", describeEvent(got), describeEvent(*tc.want))
			}
		})
	}
}

func describeEvent(e telemetry.Event) string {
	p := func(n *int32) string {
		if n == nil {
			return "nil"
		}
		return itoa(int64(*n))
	}
	return "{kind=" + e.Kind + " service=" + e.Service + " instance=" + e.Instance + " from=" + p(e.FromReplicas) +
		" to=" + p(e.ToReplicas) + " reason=" + e.Reason + " source=" + e.Source + "}"
}

func TestLogsEventAttributes(t *testing.T) {
	rl := k8sEventRecord("HorizontalPodAutoscaler", "vllm", "autoscaling/v2", "SuccessfulRescale", "New size: 3; reason: cpu above target", now)
	res := Logs(1, &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{rl}}, now, Limits{})
	attrs := res.Events[0].Attributes
	for k, want := range map[string]string{
		"k8s.event.reason":       "SuccessfulRescale",
		"k8s.event.count":        "1",
		"k8s.namespace.name":     "llm",
		"k8s.object.kind":        "HorizontalPodAutoscaler", // from the resource
		"k8s.object.api_version": "autoscaling/v2",
		"message":                "New size: 3; reason: cpu above target",
	} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
}

func TestLogsRejects(t *testing.T) {
	rec := func(ts, observed uint64) *logspb.ResourceLogs {
		rl := k8sEventRecord("Pod", "p", "v1", "Pulled", "Successfully pulled image", now)
		r := rl.ScopeLogs[0].LogRecords[0]
		r.TimeUnixNano, r.ObservedTimeUnixNano = ts, observed
		return rl
	}
	req := &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{
		rec(0, 0),
		rec(1_000, 0),
		rec(year2300, 0),
		rec(0, ns(now)), // observed time stands in
	}}
	res := Logs(1, req, now, Limits{})
	if res.Rejected != 3 || len(res.Events) != 1 {
		t.Fatalf("rejected=%d events=%d, want 3 and 1", res.Rejected, len(res.Events))
	}
	joined := strings.Join(res.Errors, "; ")
	for _, frag := range []string{"no timestamp", "before 2000", "in the future"} {
		if !strings.Contains(joined, frag) {
			t.Errorf("errors %q lack %q", joined, frag)
		}
	}
}

func TestReplicas(t *testing.T) {
	tests := []struct {
		msg      string
		from, to *int32
	}{
		{"New size: 3; reason: cpu resource utilization (percentage of request) above target", nil, i32(3)},
		{"Scaled apps/v1.Deployment llm/vllm from 0 to 1, triggered by s0-prometheus", i32(0), i32(1)},
		{"Scaled up replica set hello-00001-deployment-5d8f to 4 from 2", i32(2), i32(4)},
		{"Scaled down replica set vllm-7c9d to 0", nil, i32(0)},
		{"New size: 99999999999; reason: overflow", nil, nil},
		{"Pulling image", nil, nil},
	}
	for _, tc := range tests {
		from, to := replicas(tc.msg)
		if !reflect.DeepEqual(from, tc.from) || !reflect.DeepEqual(to, tc.to) {
			t.Errorf("replicas(%q) = %v, %v; want %v, %v", tc.msg, from, to, tc.from, tc.to)
		}
	}
}
