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
{{- else if and (hasKey $r "gpu_product") (not (and (kindIs "string" (index $r "gpu_product")) (trim (toString (index $r "gpu_product"))))) -}}
{{- $p = printf "gpu_product %s is not a GPU product name" (trunc 80 (toJson (index $r "gpu_product"))) -}}
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

{{/* The report as a dict (toJson), checked; empty without a report in the values (qualification.report, or the
older `--set-file qualification=report.json`). A report in a ConfigMap is the sidecar's to check. */}}
{{- define "vllm-rocm.qualification" -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- with $src.problem -}}{{- fail . -}}{{- end -}}
{{- with $src.report -}}
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
{{- if and (not $mode) (eq (include "vllm-rocm.qualificationRuntimeMode" .) "true") -}}
{{- /* Decided at run time from the ConfigMap; the render-time judgments take a mode the guard lets through (every
candidate was judged: vllm-rocm.qualificationCandidates). */ -}}
{{- $mode = first (append (include "vllm-rocm.qualificationCandidates" . | fromJson).modes "") -}}
{{- end -}}
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


{{/* Where the deployment's qualification comes from, as JSON:
  report       the report text given in the values (qualification.report, or `--set-file qualification=report.json`)
  configMap    the ConfigMap the pods read the report (key report.json) and its mode (key mode) from:
               qualification.fromConfigMap, or the one the qualification Job publishes ("" = none)
  job          qualification.job.enabled
  runtimeMode  the vLLM container takes cudagraph_mode from that ConfigMap when it starts (a ConfigMap source and no
               compilation.cudagraphMode or enforceEager)
  gpuProduct   the amd.com/gpu.product-name the qualification is for: qualification.gpuProduct, else the report's own
  problem      why these values cannot be used, or "" */}}
{{- define "vllm-rocm.qualificationSource" -}}
{{- $q := .Values.qualification -}}
{{- $src := dict "report" "" "configMap" "" "job" false "runtimeMode" false "gpuProduct" "" "problem" "" -}}
{{- $given := list -}}
{{- if kindIs "string" $q -}}
{{- $_ := set $src "report" $q -}}
{{- else if kindIs "map" $q -}}
{{- $_ := set $src "report" (toString (default "" (index $q "report"))) -}}
{{- $_ := set $src "configMap" (toString (default "" (index $q "fromConfigMap"))) -}}
{{- $_ := set $src "gpuProduct" (toString (default "" (index $q "gpuProduct"))) -}}
{{- $_ := set $src "job" (eq (toString (dig "job" "enabled" false $q)) "true") -}}
{{- end -}}
{{- if $src.report -}}{{- $given = append $given "qualification.report" -}}{{- end -}}
{{- if $src.configMap -}}{{- $given = append $given "qualification.fromConfigMap" -}}{{- end -}}
{{- if $src.job -}}{{- $given = append $given "qualification.job.enabled" -}}{{- end -}}
{{- if gt (len $given) 1 -}}
{{- $_ := set $src "problem" (printf "qualification: give one source of the qualification, not %s (the Job publishes the ConfigMap the deployment reads; a report file or an existing ConfigMap replaces the Job)" (join " and " $given)) -}}
{{- end -}}
{{- /* A report that names its GPU product: the deployment must be for that product. */ -}}
{{- if and $src.report (not $src.problem) -}}
{{- $r := fromJson (toString $src.report) -}}
{{- $rp := index $r "gpu_product" -}}
{{- if and (kindIs "string" $rp) $rp -}}
{{- if not $src.gpuProduct -}}
{{- $_ := set $src "gpuProduct" $rp -}}
{{- else if ne $src.gpuProduct $rp -}}
{{- $_ := set $src "problem" (printf "qualification: the report was measured on GPU product %s, qualification.gpuProduct is %s; qualify on a node of the product you deploy to" $rp $src.gpuProduct) -}}
{{- end -}}
{{- else if and $src.gpuProduct (not (hasKey $r "Error")) -}}
{{- $_ := set $src "problem" (printf "qualification: qualification.gpuProduct is %s, but the report does not say which GPU product it measured (the sidecar would refuse it): qualify with --gpu-product %s" $src.gpuProduct $src.gpuProduct) -}}
{{- end -}}
{{- end -}}
{{- if and $src.configMap (not $src.problem) .Values.multiNode.enabled -}}
{{- $_ := set $src "problem" "qualification.fromConfigMap with multiNode.enabled: the multi-node pods take their mode from the values only; give the report (qualification.report)" -}}
{{- end -}}
{{- if and $src.job (not $src.problem) -}}
{{- $_ := set $src "configMap" (include "vllm-rocm.qualificationJobConfigMap" .) -}}
{{- end -}}
{{- $_ := set $src "runtimeMode" (eq (include "vllm-rocm.qualificationRuntimeMode" .) "true") -}}
{{- toJson $src -}}
{{- end -}}

{{/* "true" when the vLLM container takes cudagraph_mode from the qualification ConfigMap as it starts: a ConfigMap
source (qualification.fromConfigMap or the Job), and neither compilation.cudagraphMode nor enforceEager. Apart from
vllm-rocm.qualificationSource because the Job's ConfigMap is named after the arguments this decides. */}}
{{- define "vllm-rocm.qualificationRuntimeMode" -}}
{{- $q := .Values.qualification -}}
{{- $cm := and (kindIs "map" $q) (or (ne (toString (default "" (index $q "fromConfigMap"))) "") (eq (toString (dig "job" "enabled" false $q)) "true")) -}}
{{- and $cm (not .Values.compilation.cudagraphMode) (not .Values.enforceEager) -}}
{{- end -}}

{{/* The kubelet's reference to the mode the vLLM container takes from the qualification ConfigMap (key `mode`). */}}
{{- define "vllm-rocm.runtimeModeVar" -}}VLLM_ROCM_CUDAGRAPH_MODE{{- end -}}

{{/* The modes the guard lets through for these values, each judged as if compilation.cudagraphMode named it, as JSON
{modes: [...], refused: ["MODE: why", ...]}: what the qualification Job may qualify and the ConfigMap may choose.
qualification.job.modes narrows the list (a mode outside it is refused). */}}
{{- define "vllm-rocm.qualificationCandidates" -}}
{{- $cache := include "vllm-rocm.renderCache" . | fromJson -}}
{{- if hasKey $cache "candidates" -}}
{{- $cache.candidates -}}
{{- else -}}
{{- $modes := list -}}
{{- $refused := list -}}
{{- $wanted := list -}}
{{- if kindIs "map" .Values.qualification -}}{{- $wanted = default list (dig "job" "modes" list .Values.qualification) -}}{{- end -}}
{{- range $m := include "vllm-rocm.modes" . | fromJsonArray -}}
{{- $c := merge (dict "cudagraphMode" $m) (deepCopy $.Values.compilation) -}}
{{- $vals := merge (dict "compilation" $c "qualification" "") (omit $.Values "compilation" "qualification" "__vllmRocmRenderCache") -}}
{{- $ctx := dict "Values" $vals "Release" $.Release "Chart" $.Chart "Files" $.Files "Capabilities" $.Capabilities "Template" $.Template -}}
{{- $e := include "vllm-rocm.effective" $ctx | fromJson -}}
{{- $p := "" -}}
{{- with $e.refusals -}}{{- $p = first . -}}{{- end -}}
{{- if not $p -}}{{- $p = include "vllm-rocm.modeRefusal" (dict "root" $ctx "e" $e) -}}{{- end -}}
{{- if and (not $p) $wanted (not (has $m $wanted)) -}}{{- $p = "not in qualification.job.modes" -}}{{- end -}}
{{- if $p -}}
{{- $refused = append $refused (printf "%s: %s" $m (replace "\n" " " $p)) -}}
{{- else -}}
{{- $modes = append $modes $m -}}
{{- end -}}
{{- end -}}
{{- $out := toJson (dict "modes" $modes "refused" $refused) -}}
{{- $_ := set (index .Values "__vllmRocmRenderCache") "candidates" $out -}}
{{- $out -}}
{{- end -}}
{{- end -}}

{{/* One render's memo (five modes judged per candidate list is too slow to redo at every include): a map kept in
.Values under a key no value file may use (values.schema.json refuses unknown top-level keys), created on first use.
Returns its contents as JSON; writers set into index .Values "__vllmRocmRenderCache". The per-mode contexts of
vllm-rocm.qualificationCandidates are built without it, so they never read the deployment's entries. */}}
{{- define "vllm-rocm.renderCache" -}}
{{- if not (hasKey .Values "__vllmRocmRenderCache") -}}
{{- $_ := set .Values "__vllmRocmRenderCache" dict -}}
{{- end -}}
{{- toJson (index .Values "__vllmRocmRenderCache") -}}
{{- end -}}

{{/* What the qualification Job judges, as JSON: everything its report depends on. The Job's ConfigMap is named after
it, so a change of any input qualifies again and rolls the pods onto the new report, and an upgrade that changes
none of them finds its report current (the Job then publishes nothing and qualifies nothing). */}}
{{- define "vllm-rocm.qualificationInputs" -}}
{{- $job := dig "job" dict .Values.qualification -}}
{{- toJson (dict
  "image" (include "vllm-rocm.image" .) "release" (toString .Values.vllm.release) "command" .Values.vllm.command
  "model" (toString .Values.model.name) "served" (include "vllm-rocm.servedName" .)
  "args" (include "vllm-rocm.qualifyServerArgs" . | fromJsonArray) "env" (include "vllm-rocm.vllmEnv" . | fromYamlArray)
  "gpuProduct" (toString (dig "gpuProduct" "" .Values.qualification))
  "modes" (include "vllm-rocm.qualificationCandidates" . | fromJson).modes "qualifyArgs" (default list (index $job "args"))) -}}
{{- end -}}

{{- define "vllm-rocm.qualificationJobConfigMap" -}}
{{- $cache := include "vllm-rocm.renderCache" . | fromJson -}}
{{- if hasKey $cache "jobConfigMap" -}}
{{- $cache.jobConfigMap -}}
{{- else -}}
{{- $name := printf "%s-q-%s" (include "vllm-rocm.fullname" . | trunc 48 | trimSuffix "-") (include "vllm-rocm.qualificationInputs" . | sha256sum | trunc 12) -}}
{{- $_ := set (index .Values "__vllmRocmRenderCache") "jobConfigMap" $name -}}
{{- $name -}}
{{- end -}}
{{- end -}}

{{/* `vllm serve`'s arguments for the qualification's servers: the deployment's, less what qualify sets per server
(model, served name, host, port, cudagraph mode), as a JSON list. */}}
{{- define "vllm-rocm.qualifyServerArgs" -}}
{{- $args := include "vllm-rocm.serveArgs" . | fromYamlArray -}}
{{- $out := list -}}
{{- $skip := 0 -}}
{{- range $i, $a := rest $args -}}
{{- if gt $skip 0 -}}
{{- $skip = sub $skip 1 -}}
{{- else if has (toString $a) (list "--host" "--port" "--served-model-name" "--compilation-config") -}}
{{- $skip = 1 -}}
{{- else -}}
{{- $out = append $out (toString $a) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Words as one POSIX shell line (each single-quoted): qualify's --command and --server-args are split like one. */}}
{{- define "vllm-rocm.shellWords" -}}
{{- $out := list -}}
{{- range . -}}{{- $out = append $out (printf "'%s'" (replace "'" "'\\''" (toString .))) -}}{{- end -}}
{{- join " " $out -}}
{{- end -}}

{{/* Why the qualification Job cannot run for these values, or "". */}}
{{- define "vllm-rocm.qualificationJobProblem" -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- if $src.job -}}
{{- $cand := include "vllm-rocm.qualificationCandidates" . | fromJson -}}
{{- if not $src.gpuProduct -}}
qualification.job.enabled needs qualification.gpuProduct: the amd.com/gpu.product-name of the nodes this deployment runs on (e.g. AMD_Instinct_MI300X_OAM). The Job qualifies on a node of that product and the pods run only there: a report proves a mode on the GPU it was measured on
{{- else if .Values.multiNode.enabled -}}
qualification.job.enabled with multiNode.enabled: qualify runs one node's servers; qualify a multi-node deployment by hand and give the report (qualification.report)
{{- else if or .Values.compilation.captureSizes .Values.compilation.compilationConfig -}}
qualification.job.enabled with compilation.captureSizes or compilation.compilationConfig: qualify sets only cudagraph_mode on its servers, so its report would prove another configuration than the one deployed; drop them, or qualify by hand and give the report
{{- else if or (ne (int64 .Values.sidecar.canarySeed) 20251202) (ne (atoi (include "vllm-rocm.canaryLongPrompts" .)) (max 0 (min 2 (sub 13 (int .Values.sidecar.canaryNumProblems))))) -}}
qualification.job.enabled: the report's canary baseline is recorded by qualify with seed 20251202 and its long prompts (2, within 16 requests), and the sidecar only takes a baseline of its own canary's problem set; sidecar.canarySeed={{ .Values.sidecar.canarySeed }}, canaryLongPrompts/canaryMaxRequests give {{ include "vllm-rocm.canaryLongPrompts" . }} long prompts. Keep the canary's defaults, or qualify by hand and give the report
{{- else if not $cand.modes -}}
qualification.job.enabled: the guard lets no cudagraph mode through for these values, so there is nothing to qualify: {{ join "; " $cand.refused }}
{{- end -}}
{{- end -}}
{{- end -}}
