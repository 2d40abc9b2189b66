{{/*
A qualification report (`vllm-rocm qualify run`, given with `--set-file qualification=report.json`) decides
the cudagraph mode and, through the sidecar's --qualification, the canary baseline: the report's recommended mode
unless compilation.cudagraphMode names one, and a mode the report did not pass is refused, as are a report for
another model or vLLM release and a malformed report.

The rules are those of the Python reader the sidecar and compose's gate use (vllm_rocm_health.qualification: validate,
choose_mode, check_served_model; the baseline through vllm_rocm_health.canary.baseline), plus one the Python reader
does not have: vllm_version must be present and name vllm.release. tests/charts/test_qualification_agreement.py
renders generated bad reports through both and fails where they disagree.
*/}}

{{- define "vllm-rocm.modes" -}}["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]{{- end -}}

{{/* Why a report cannot be used, or "". Pure, so that tests can call it on many reports in one render.
In: dict text (the report JSON), mode (compilation.cudagraphMode; "" = the report's recommendation), eager,
served (the served model name), release (vllm.release), seed and numProblems (the canary's). */}}
{{- define "vllm-rocm.qualificationProblem" -}}
{{- $modes := include "vllm-rocm.modes" . | fromJsonArray -}}
{{- $verdicts := list "pass" "fail" "error" -}}
{{- $r := fromJson (toString .text) -}}
{{- $p := "" -}}
{{- if and (hasKey $r "Error") (eq (len $r) 1) -}}
{{- $p = printf "not JSON (%v); pass the report file with --set-file qualification=report.json" $r.Error -}}
{{- else if not (and (eq (toString (index $r "kind")) "vllm-rocm-qualification") (kindIs "string" (index $r "kind"))
                     (kindIs "float64" (index $r "format")) (eq (index $r "format") 1.0)) -}}
{{- $p = printf "not a qualification report of format 1 (kind %s, format %s)" (toJson (index $r "kind")) (toJson (index $r "format")) -}}
{{- else if not (and (kindIs "slice" $r.rows) (gt (len $r.rows) 0)) -}}
{{- $p = "the report has no rows" -}}
{{- else -}}
{{- $seen := dict -}}
{{- range $i, $row := $r.rows -}}
{{- if not $p -}}
{{- if not (and (kindIs "map" $row) (kindIs "string" (index $row "mode")) (has (index $row "mode") $modes)
                (kindIs "string" (index $row "verdict")) (has (index $row "verdict") $verdicts)) -}}
{{- $p = printf "row %d needs a mode (%s) and a verdict (%s); got %s" $i (join ", " $modes) (join ", " $verdicts) (trunc 120 (toJson $row)) -}}
{{- else if hasKey $seen $row.mode -}}
{{- $p = printf "mode %s appears twice in the rows (which would the report mean?)" $row.mode -}}
{{- else -}}
{{- $_ := set $seen $row.mode $row -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not $p) (hasKey $r "recommended") (not (kindIs "invalid" $r.recommended)) -}}
{{- $rec := $r.recommended -}}
{{- if not (and (kindIs "string" $rec) (hasKey $seen $rec) (eq (index $seen $rec).verdict "pass")) -}}
{{- $p = printf "recommends %s, which is not a passing row" (toJson $rec) -}}
{{- end -}}
{{- end -}}
{{- if and (not $p) (hasKey $r "baseline") (not (kindIs "invalid" $r.baseline)) -}}
{{- if not (and (kindIs "map" $r.baseline) (kindIs "slice" (index $r.baseline "answers")) (kindIs "slice" (index $r.baseline "fingerprints"))) -}}
{{- $p = "baseline is not a canary baseline" -}}
{{- end -}}
{{- end -}}
{{- /* Now what this deployment takes from it (check_served_model, choose_mode, the baseline, the release). */ -}}
{{- if not $p -}}
{{- $served := index $r "served_model_name" -}}
{{- if not (and (kindIs "string" $served) (eq $served (toString .served))) -}}
{{- $p = printf "the report qualified model %s, this release serves %q; qualify this model" (toJson $served) (toString .served) -}}
{{- end -}}
{{- end -}}
{{- if not $p -}}
{{- $mode := toString .mode -}}
{{- if not $mode -}}
{{- if kindIs "string" (index $r "recommended") -}}{{- $mode = $r.recommended -}}{{- end -}}
{{- if not $mode -}}
{{- $rows := list -}}
{{- range $r.rows -}}{{- $rows = append $rows (printf "%s: %s" .mode .verdict) -}}{{- end -}}
{{- $p = printf "the report recommends no mode: none passed (%s); fix the image or model, or deploy without this report" (join "; " $rows) -}}
{{- end -}}
{{- end -}}
{{- if not $p -}}
{{- $checked := ternary "NONE" $mode (eq (toString .eager) "true") -}}
{{- $p = include "vllm-rocm.qualificationModeProblem" (dict "report" $r "mode" $checked "why" (ternary " (enforceEager runs NONE)" "" (eq (toString .eager) "true"))) -}}
{{- end -}}
{{- end -}}
{{- if not $p -}}
{{- if not (kindIs "map" (index $r "baseline")) -}}
{{- $p = "the report carries no canary baseline" -}}
{{- else -}}
{{- with include "vllm-rocm.baselineProblem" (dict "baseline" $r.baseline "model" .served "seed" .seed "numProblems" .numProblems "longPrompts" .longPrompts) -}}
{{- $p = printf "its baseline: %s" . -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $p -}}
{{- $version := index $r "vllm_version" -}}
{{- if not (and (kindIs "string" $version) $version) -}}
{{- $p = printf "the report does not say which vLLM it measured (vllm_version %s): it cannot be matched to vllm.release %s; qualify the image you deploy with a current `vllm-rocm qualify`" (toJson $version) (toString .release) -}}
{{- else if ne $version (toString .release) -}}
{{- $p = printf "the report was measured on vLLM %s, vllm.release is %s; qualify the image you deploy" $version (toString .release) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/* Why `mode` may not be deployed under a (structurally valid) report, or "" (choose_mode). */}}
{{- define "vllm-rocm.qualificationModeProblem" -}}
{{- $row := dict -}}
{{- $covered := list -}}
{{- range .report.rows -}}
{{- $covered = append $covered .mode -}}
{{- if eq .mode $.mode -}}{{- $row = . -}}{{- end -}}
{{- end -}}
{{- if not $row -}}
{{- printf "cudagraph_mode %s was not qualified: the report covers %s; qualify it, or choose a mode it passed%s" .mode (join ", " $covered) .why -}}
{{- else if ne $row.verdict "pass" -}}
{{- $reason := index $row "verdict_reason" -}}
{{- printf "cudagraph_mode %s %s qualification on this node: %s. Choose a mode the report passed (recommended: %v)%s" .mode (ternary "failed" "errored" (eq $row.verdict "fail")) (ternary (toString $reason) "no reason recorded" (and (kindIs "string" $reason) (ne $reason ""))) (default "none" (index .report "recommended")) .why -}}
{{- end -}}
{{- end -}}

{{/* The report as a dict (toJson), checked; empty without a report. */}}
{{- define "vllm-rocm.qualification" -}}
{{- with .Values.qualification -}}
{{- with include "vllm-rocm.qualificationProblem" (dict "text" . "mode" $.Values.compilation.cudagraphMode "eager" $.Values.enforceEager
      "served" (include "vllm-rocm.servedName" $) "release" $.Values.vllm.release
      "seed" $.Values.sidecar.canarySeed "numProblems" $.Values.sidecar.canaryNumProblems
      "longPrompts" (atoi (include "vllm-rocm.canaryLongPrompts" $))) -}}
{{- fail (printf "qualification: %s" .) -}}
{{- end -}}
{{- toJson (fromJson .) -}}
{{- end -}}
{{- end -}}

{{/* The cudagraph mode to render: compilation.cudagraphMode, else the report's recommendation, else
FULL_AND_PIECEWISE (vLLM's default since 0.11). */}}
{{- define "vllm-rocm.cudagraphMode" -}}
{{- $mode := .Values.compilation.cudagraphMode -}}
{{- with include "vllm-rocm.qualification" . -}}
{{- if not $mode -}}{{- $mode = (fromJson .).recommended -}}{{- end -}}
{{- end -}}
{{- default "FULL_AND_PIECEWISE" $mode -}}
{{- end -}}

{{/* The mode vLLM's config line will show (--expected-mode) must have passed the report too: the sidecar refuses to
start otherwise. It differs from the requested mode when the compilation settings change it (_effective.tpl). */}}
{{- define "vllm-rocm.qualificationConfigModeProblem" -}}
{{- with include "vllm-rocm.qualification" . -}}
{{- $e := include "vllm-rocm.effective" $ | fromJson -}}
{{- if ne $e.configMode (ternary "NONE" $e.requestedMode $.Values.enforceEager) -}}
{{- include "vllm-rocm.qualificationModeProblem" (dict "report" (fromJson .) "mode" $e.configMode "why" (printf " (%s is what vLLM %s runs compilation.cudagraphMode=%s as: %s; the sidecar expects it)" $e.configMode $e.releasePatch $e.requestedMode (join "; " $e.modeChanges))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
