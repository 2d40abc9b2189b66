{{/*
A qualification report (`vllm-rocm-stack qualify run`, given with `--set-file qualification=report.json`) decides
the cudagraph mode and the canary baseline: the report's recommended mode unless compilation.cudagraphMode names
one, and a mode the report did not pass is refused, as are a report for another model or vLLM release and a
malformed report. The same rules as vllm_rocm_health.qualification (Report.choose_mode), which compose's gate runs.
*/}}

{{/* The report as a dict (toJson), checked; empty without a report. */}}
{{- define "vllm-rocm.qualification" -}}
{{- with .Values.qualification -}}
{{- $r := fromJson . -}}
{{- if hasKey $r "Error" -}}
{{- fail (printf "qualification: not JSON (%s); pass the report file with --set-file qualification=report.json" $r.Error) -}}
{{- end -}}
{{- if or (ne (toString $r.kind) "vllm-rocm-qualification") (ne (toString $r.format) "1") -}}
{{- fail (printf "qualification: not a qualification report of format 1 (kind %v, format %v)" $r.kind $r.format) -}}
{{- end -}}
{{- if not (kindIs "slice" $r.rows) -}}
{{- fail "qualification: the report has no rows" -}}
{{- end -}}
{{- range $r.rows -}}
{{- if or (not (has (toString .mode) (list "NONE" "PIECEWISE" "FULL" "FULL_DECODE_ONLY" "FULL_AND_PIECEWISE"))) (not (has (toString .verdict) (list "pass" "fail" "error"))) -}}
{{- fail (printf "qualification: a row needs a cudagraph mode and a verdict (pass, fail, error); got mode %v, verdict %v" .mode .verdict) -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "map" $r.baseline) -}}
{{- fail "qualification: the report carries no canary baseline" -}}
{{- end -}}
{{- toJson $r -}}
{{- end -}}
{{- end -}}

{{/* The cudagraph mode to render: compilation.cudagraphMode, else the report's recommendation, else
FULL_AND_PIECEWISE (vLLM's default since 0.11). With a report, the mode must have passed it (NONE with enforceEager). */}}
{{- define "vllm-rocm.cudagraphMode" -}}
{{- $mode := .Values.compilation.cudagraphMode -}}
{{- with include "vllm-rocm.qualification" . -}}
{{- $r := fromJson . -}}
{{- if not $mode -}}
{{- if not $r.recommended -}}
{{- fail "qualification: the report recommends no mode (none passed); fix the image or model, or deploy without this report" -}}
{{- end -}}
{{- $mode = $r.recommended -}}
{{- end -}}
{{- $checked := ternary "NONE" $mode $.Values.enforceEager -}}
{{- $row := dict -}}
{{- range $r.rows -}}{{- if eq .mode $checked -}}{{- $row = . -}}{{- end -}}{{- end -}}
{{- if not $row -}}
{{- fail (printf "qualification: cudagraph_mode %s was not qualified by the report; qualify it, or choose a mode it passed" $checked) -}}
{{- end -}}
{{- if ne $row.verdict "pass" -}}
{{- fail (printf "qualification: cudagraph_mode %s %s qualification on this node: %s. Choose a mode the report passed (recommended: %v)" $checked (ternary "failed" "errored" (eq $row.verdict "fail")) (default "no reason recorded" $row.verdict_reason) $r.recommended) -}}
{{- end -}}
{{- if ne (toString $r.served_model_name) (include "vllm-rocm.servedName" $) -}}
{{- fail (printf "qualification: the report qualified model %q, this release serves %q; qualify this model" (toString $r.served_model_name) (include "vllm-rocm.servedName" $)) -}}
{{- end -}}
{{- if and $r.vllm_version (ne (toString $r.vllm_version) (toString $.Values.vllm.release)) -}}
{{- fail (printf "qualification: the report was measured on vLLM %s, vllm.release is %v; qualify the image you deploy" (toString $r.vllm_version) $.Values.vllm.release) -}}
{{- end -}}
{{- end -}}
{{- default "FULL_AND_PIECEWISE" $mode -}}
{{- end -}}

{{/* The canary baseline JSON: canary.baseline, or the one the report took from its reference run. */}}
{{- define "vllm-rocm.canaryBaseline" -}}
{{- $q := include "vllm-rocm.qualification" . -}}
{{- if and $q .Values.canary.baseline -}}
{{- fail "give the canary baseline once: canary.baseline, or the qualification report's (not both)" -}}
{{- end -}}
{{- if $q -}}
{{- toJson (fromJson $q).baseline -}}
{{- else -}}
{{- .Values.canary.baseline -}}
{{- end -}}
{{- end -}}
