-- What a call carries besides its timings, as typed columns of spans so the
-- assembler reads them without the attribute map: the ids and endpoint that
-- join a server span arriving in its own trace to its client call
-- (response_id: the chatcmpl-… id, gen_ai.response.id on the client and
-- gen_ai.request.id on vLLM/SGLang; server_address/server_port: where the
-- client sent it),
-- where the client TTFT came from (ttft_source), and how often the server
-- preempted the request (preemptions, from vLLM's journey events). Parts stored before this
-- migration read empty, 0 and NULL.
ALTER TABLE {{table "spans"}} {{onCluster}} {{llmCallColumns}};
{{if .Cluster}}ALTER TABLE spans {{onCluster}} {{llmCallColumns}};{{end}}
