{{/*
What the health sidecar is told. It is the authority on what runs: it compares vLLM's own config line with
--expected-mode, judges the known issues with the same allow list as the guard (--allow-known-issues), and gates
readiness on an accuracy canary against a reference (--canary-baseline, or --qualification, whose report carries one).
Every setting that reaches /readyz is a typed value; sidecar.extraArgs / sidecar.extraEnv may set only what cannot
change readiness (below), so no extra argument can switch the canary off, point it elsewhere or loosen it.
*/}}

{{/* Sidecar settings: value under sidecar.* -> flag of `vllm-rocm-health serve`. zero: 0 renders no flag (the
sidecar's default); int: rendered as an integer. */}}
{{- define "vllm-rocm.sidecarSettings" -}}
- {value: canaryInterval, flag: --canary-interval}
- {value: canaryTimeout, flag: --canary-timeout, zero: true}
- {value: canaryMaxAgeIntervals, flag: --canary-max-age-intervals, zero: true}
- {value: canaryMaxTokens, flag: --canary-max-tokens, zero: true, int: true}
- {value: healthInterval, flag: --health-interval, zero: true}
- {value: healthTimeout, flag: --health-timeout}
- {value: canaryNumProblems, flag: --canary-num-problems, int: true}
- {value: canarySeed, flag: --canary-seed, int: true}
- {value: canaryMaxRequests, flag: --canary-max-requests, int: true}
- {value: canaryConcurrency, flag: --canary-concurrency, int: true}
- {value: canaryLongPrompts, flag: --canary-long-prompts, int: true}
- {value: canaryFreshProblems, flag: --canary-fresh-problems, int: true}
- {value: canaryScoreTolerance, flag: --canary-score-tolerance}
- {value: canaryFingerprintTolerance, flag: --canary-fingerprint-tolerance}
- {value: canaryIdleProbeAfter, flag: --canary-idle-probe-after}
- {value: canaryMaxBackoffIntervals, flag: --canary-max-backoff-intervals}
{{- end -}}

{{/* The only sidecar flags (and their VLLM_HEALTH_* twins) sidecar.extraArgs / sidecar.extraEnv may set: logging
and Kubernetes Events. An allow list: a flag the sidecar gains later is refused until reviewed here
(tests/charts/test_sidecar_args.py holds this list to the sidecar's own parser). */}}
{{- define "vllm-rocm.sidecarHarmless" -}}
flags: [--log-format, --log-level, --events, --no-events]
env: [VLLM_HEALTH_LOG_FORMAT, VLLM_HEALTH_LOG_LEVEL, VLLM_HEALTH_EVENTS]
{{- end -}}

{{/* The typed value behind a sidecar flag, for the refusal message. */}}
{{- define "vllm-rocm.sidecarFlagOwners" -}}
--canary-baseline: canary.baseline or canary.existingConfigMap
--baseline: canary.baseline or canary.existingConfigMap
--canary-enabled: canary.enabled
--no-canary-enabled: canary.enabled
--qualification: qualification
--gpu-product: qualification.gpuProduct
--expected-mode: compilation.cudagraphMode (the chart passes the mode vLLM's config line will show)
--requested-mode: compilation.cudagraphMode (the chart passes the mode vLLM's config line will show)
--allow-known-issues: allowKnownIssues
--model: model.servedName
--vllm-url: vllm.port (the chart points the sidecar at the vLLM container of its own pod)
--listen: sidecar.port
--log-source: nothing (the chart follows the vllm container's log through the Kubernetes API)
--k8s-container: nothing (the chart follows the vllm container's log through the Kubernetes API)
--log-from-start: nothing (the chart follows the vllm container's log through the Kubernetes API)
{{- end -}}

{{/* The accuracy reference, as JSON: kind (baseline, existingConfigMap, qualification, disabled; "" = none), flag and
path (what the sidecar reads), configMap and key (what is mounted), text (what the chart puts in its ConfigMap) and
problem (why the render must fail, or ""). Never fails itself: vllm-rocm.validate fails on the problem, after the
guard's other refusals. */}}
{{- define "vllm-rocm.accuracyReference" -}}
{{- $c := .Values.canary -}}
{{- $given := list -}}
{{- if $c.baseline -}}{{- $given = append $given "canary.baseline" -}}{{- end -}}
{{- if $c.existingConfigMap -}}{{- $given = append $given "canary.existingConfigMap" -}}{{- end -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- if $src.report -}}{{- $given = append $given "qualification" -}}{{- end -}}
{{- if $src.configMap -}}{{- $given = append $given (ternary "qualification.job" "qualification.fromConfigMap" $src.job) -}}{{- end -}}
{{- $mount := trimSuffix "/" $c.mountPath -}}
{{- $ref := dict "kind" "" "flag" "" "path" "" "configMap" "" "key" "" "text" "" "problem" "" -}}
{{- if eq (toString $c.enabled) "false" -}}
{{- $_ := set $ref "kind" "disabled" -}}
{{- if $given -}}
{{- $_ := set $ref "problem" (printf "canary.enabled=false together with %s: a reference for a canary that is switched off is a contradiction (the sidecar refuses it too). Drop canary.enabled=false to check the answers, or drop %s" (join " and " $given) (join " and " $given)) -}}
{{- end -}}
{{- else if not $given -}}
{{- $_ := set $ref "problem" (include "vllm-rocm.noReferenceMessage" .) -}}
{{- else if gt (len $given) 1 -}}
{{- $_ := set $ref "problem" (printf "give the canary's accuracy reference once: %s are given (the qualification report carries its own baseline)" (join " and " $given)) -}}
{{- else if $c.baseline -}}
{{- $_ := set $ref "kind" "baseline" -}}
{{- $_ := set $ref "flag" "--canary-baseline" -}}
{{- $_ := set $ref "configMap" (printf "%s-canary" (include "vllm-rocm.fullname" .)) -}}
{{- $_ := set $ref "key" $c.key -}}
{{- $_ := set $ref "text" (toString $c.baseline) -}}
{{- with include "vllm-rocm.baselineTextProblem" (dict "text" $c.baseline "model" (include "vllm-rocm.servedName" .) "seed" .Values.sidecar.canarySeed "numProblems" .Values.sidecar.canaryNumProblems "longPrompts" (atoi (include "vllm-rocm.canaryLongPrompts" .))) -}}
{{- $_ := set $ref "problem" (printf "canary.baseline: %s" .) -}}
{{- end -}}
{{- else if $c.existingConfigMap -}}
{{- $_ := set $ref "kind" "existingConfigMap" -}}
{{- $_ := set $ref "flag" "--canary-baseline" -}}
{{- $_ := set $ref "configMap" $c.existingConfigMap -}}
{{- $_ := set $ref "key" $c.key -}}
{{- else if $src.configMap -}}
{{- /* The report in a ConfigMap the chart does not write (the Job's, or the operator's): the sidecar checks it. */ -}}
{{- $_ := set $ref "kind" "qualification" -}}
{{- $_ := set $ref "flag" "--qualification" -}}
{{- $_ := set $ref "configMap" $src.configMap -}}
{{- $_ := set $ref "key" "report.json" -}}
{{- $_ := set $ref "external" true -}}
{{- else -}}
{{- $_ := set $ref "kind" "qualification" -}}
{{- $_ := set $ref "flag" "--qualification" -}}
{{- $_ := set $ref "configMap" (printf "%s-qualification" (include "vllm-rocm.fullname" .)) -}}
{{- $_ := set $ref "key" "qualification.json" -}}
{{- $_ := set $ref "text" (toString $src.report) -}}
{{- end -}}
{{- if $ref.key -}}{{- $_ := set $ref "path" (printf "%s/%s" $mount $ref.key) -}}{{- end -}}
{{- toJson $ref -}}
{{- end -}}

{{/* The long prompts one canary run sends: --canary-long-prompts, within what --canary-max-requests leaves after the
fingerprint texts and the problems (vllm_rocm_health.canary.runner.budget). A baseline must hold this many answers. */}}
{{- define "vllm-rocm.canaryLongPrompts" -}}
{{- $s := .Values.sidecar -}}
{{- $room := sub (int $s.canaryMaxRequests) 3 -}}
{{- $problems := max 0 (min (int $s.canaryNumProblems) $room) -}}
{{- max 0 (min (int $s.canaryLongPrompts) (sub $room $problems)) -}}
{{- end -}}

{{- define "vllm-rocm.noReferenceMessage" -}}
no accuracy reference for the canary. The sidecar gates readiness on a canary that compares vLLM's answers with a reference recorded for this model and configuration; without one nothing would notice a server that answers HTTP 200 with wrong tokens, and pods would go Ready in front of it. Give one of:
  - canary.baseline: --set-file canary.baseline=baseline.json, recorded from a known-good server of this model and configuration with `vllm-rocm-health baseline record --out baseline.json --vllm-url http://HOST:8000 --model {{ include "vllm-rocm.servedName" . }}` (README "Accuracy gate": how to get a first one)
  - canary.existingConfigMap: a ConfigMap holding that file under canary.key ({{ .Values.canary.key }})
  - qualification: --set-file qualification=report.json, a `vllm-rocm qualify run` report for this image, model and node (it carries a baseline and chooses the mode)
or switch the canary off knowingly with canary.enabled=false: then nothing catches wrong tokens, and NOTES, the metric vllm_canary_configured 0 and the alert VllmCanaryNotConfigured say so.
{{- end -}}

{{/* Why the text of a baseline file cannot be used, or "". In: dict text, model, seed, numProblems. */}}
{{- define "vllm-rocm.baselineTextProblem" -}}
{{- $b := fromJson (toString .text) -}}
{{- if and (hasKey $b "Error") (eq (len $b) 1) -}}
{{- printf "not JSON (%v); pass the file with --set-file canary.baseline=baseline.json" $b.Error -}}
{{- else -}}
{{- include "vllm-rocm.baselineProblem" (dict "baseline" $b "model" .model "seed" .seed "numProblems" .numProblems "longPrompts" .longPrompts) -}}
{{- end -}}
{{- end -}}

{{/* Why a canary baseline (a parsed JSON value) cannot be used, or "": the rules of the sidecar's reader
(vllm_rocm_health.canary.baseline: Baseline.load, Baseline.problem, check_matches) that a template can evaluate. Not
evaluated: whether `score` matches `answers` (it needs the seeded problem generator); the sidecar refuses such a file
at start. JSON numbers arrive here as float64, so an integer written as 8.0 passes here and is refused there.
In: dict baseline, model (the served name), seed, numProblems (the canary's). */}}
{{- define "vllm-rocm.baselineProblem" -}}
{{- $b := .baseline -}}
{{- $fields := list "model" "seed" "num_problems" "max_tokens" "answers" "score" "fingerprints" "long_prompts" "long_answers" "created" "server_version" "notes" "format" -}}
{{- $required := list "model" "seed" "num_problems" "max_tokens" "answers" "score" "fingerprints" -}}
{{- $texts := 3 -}}
{{- $recorded := 0.0 -}}{{- /* len(vllm_rocm_health.canary.fingerprint.REFERENCE_TEXTS) */ -}}
{{- $p := "" -}}
{{- if not (kindIs "map" $b) -}}
{{- $p = printf "expected a JSON object, got %s" (kindOf $b) -}}
{{- else if not (and (hasKey $b "format") (kindIs "float64" $b.format) (or (eq $b.format 2.0) (and (eq $b.format 1.0) (not (hasKey $b "long_prompts")) (not (hasKey $b "long_answers"))))) -}}
{{- $p = printf "format %s, this sidecar reads 2" (toJson (index $b "format")) -}}
{{- else -}}
{{- $unknown := list -}}
{{- range $k, $_ := $b -}}{{- if not (has $k $fields) -}}{{- $unknown = append $unknown $k -}}{{- end -}}{{- end -}}
{{- $missing := list -}}
{{- range $required -}}{{- if not (hasKey $b .) -}}{{- $missing = append $missing . -}}{{- end -}}{{- end -}}
{{- if or $unknown $missing -}}
{{- $p = trimPrefix "; " (printf "%s%s" (ternary (printf "; unknown fields %s" (toJson (sortAlpha $unknown))) "" (gt (len $unknown) 0)) (ternary (printf "; missing fields %s" (toJson $missing)) "" (gt (len $missing) 0))) -}}
{{- else if not (and (kindIs "string" $b.model) $b.model) -}}
{{- $p = printf "model %s is not a model name" (toJson $b.model) -}}
{{- else -}}
{{- range $name := list "seed" "num_problems" "max_tokens" -}}
{{- $x := index $b $name -}}
{{- if and (not $p) (not (and (kindIs "float64" $x) (eq $x (floor $x)) (ge $x (ternary 0.0 1.0 (eq $name "seed"))))) -}}
{{- $p = printf "%s %s is not a %s integer" $name (toJson $x) (ternary "non-negative" "positive" (eq $name "seed")) -}}
{{- end -}}
{{- end -}}
{{- if not $p -}}
{{- /* format 1 recorded no long-prompt answers: it reads as long_prompts 0, as the sidecar's reader does. */ -}}
{{- $longPrompts := ternary (index $b "long_prompts") 0.0 (hasKey $b "long_prompts") -}}
{{- $longAnswers := ternary (index $b "long_answers") list (hasKey $b "long_answers") -}}
{{- $longOk := kindIs "slice" $longAnswers -}}
{{- if $longOk -}}
{{- range $longAnswers -}}
{{- if not (or (kindIs "invalid" .) (and (kindIs "float64" .) (eq . (floor .)))) -}}{{- $longOk = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $recorded = $longPrompts -}}
{{- $answersOk := kindIs "slice" $b.answers -}}
{{- if $answersOk -}}
{{- range $b.answers -}}
{{- if not (or (kindIs "invalid" .) (and (kindIs "float64" .) (eq . (floor .)))) -}}{{- $answersOk = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $answersOk -}}
{{- $p = printf "answers %s are not a list of integers or nulls" (trunc 80 (toJson $b.answers)) -}}
{{- else if ne (float64 (len $b.answers)) $b.num_problems -}}
{{- $p = printf "%d answers for %s problems" (len $b.answers) (toJson $b.num_problems) -}}
{{- else if not (and (kindIs "float64" $b.score) (ge $b.score 0.0) (le $b.score 1.0)) -}}
{{- $p = printf "score %s is not a number from 0 to 1" (toJson $b.score) -}}
{{- else if not (and (kindIs "float64" $longPrompts) (eq $longPrompts (floor $longPrompts)) (ge $longPrompts 0.0)) -}}
{{- $p = printf "long_prompts %s is not a non-negative integer" (toJson $longPrompts) -}}
{{- else if not $longOk -}}
{{- $p = printf "long_answers %s are not a list of integers or nulls" (trunc 80 (toJson $longAnswers)) -}}
{{- else if ne (float64 (len $longAnswers)) $longPrompts -}}
{{- $p = printf "%d long_answers for %s long prompts" (len $longAnswers) (toJson $longPrompts) -}}
{{- else if not (and (kindIs "slice" $b.fingerprints) (eq (len $b.fingerprints) $texts)) -}}
{{- $p = printf "fingerprints: expected %d lists (one per reference text), got %s" $texts (trunc 80 (toJson $b.fingerprints)) -}}
{{- else -}}
{{- range $i, $fp := $b.fingerprints -}}
{{- $ok := and (kindIs "slice" $fp) (ge (len $fp) 2) -}}
{{- if $ok -}}
{{- if not (or (kindIs "invalid" (first $fp)) (kindIs "float64" (first $fp))) -}}{{- $ok = false -}}{{- end -}}
{{- range rest $fp -}}{{- if not (kindIs "float64" .) -}}{{- $ok = false -}}{{- end -}}{{- end -}}
{{- end -}}
{{- if and (not $p) (not $ok) -}}
{{- $p = printf "fingerprints[%d] is not a list of finite logprobs: %s" $i (trunc 80 (toJson $fp)) -}}
{{- end -}}
{{- end -}}
{{- if and (not $p) (hasKey $b "created") (not (kindIs "float64" $b.created)) -}}
{{- $p = printf "created %s is not a timestamp" (toJson $b.created) -}}
{{- end -}}
{{- range $name := list "server_version" "notes" -}}
{{- if and (not $p) (hasKey $b $name) (not (kindIs "string" (index $b $name))) -}}
{{- $p = printf "%s %s is not a string" $name (toJson (index $b $name)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* check_matches: a baseline is only valid for the model and problem set it was taken with. */ -}}
{{- if not $p -}}
{{- $m := list -}}
{{- if and (not (kindIs "invalid" .longPrompts)) (ne (float64 .longPrompts) (float64 $recorded)) -}}{{- $m = append $m (printf "%v long prompts per run (sidecar.canaryLongPrompts, within sidecar.canaryMaxRequests) != baseline's %v%s" (int64 .longPrompts) (int64 $recorded) (ternary " (the baseline holds no long-prompt answers, like every format-1 file: record a new one, or set sidecar.canaryLongPrompts=0 and leave the prefill rows unchecked)" "" (eq (float64 $recorded) 0.0))) -}}{{- end -}}
{{- if ne $b.model (toString .model) -}}{{- $m = append $m (printf "model %q != baseline's %q" (toString .model) $b.model) -}}{{- end -}}
{{- if ne $b.seed (float64 .seed) -}}{{- $m = append $m (printf "seed %v (sidecar.canarySeed) != baseline's %s" (int64 .seed) (toJson $b.seed)) -}}{{- end -}}
{{- if ne $b.num_problems (float64 .numProblems) -}}{{- $m = append $m (printf "num_problems %v (sidecar.canaryNumProblems) != baseline's %s" (int64 .numProblems) (toJson $b.num_problems)) -}}{{- end -}}
{{- with $m -}}
{{- $p = printf "baseline does not match this canary: %s (record a new baseline for this configuration)" (join "; " .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/* A setting as the sidecar's flag parser reads it: integers without a fraction or exponent. */}}
{{- define "vllm-rocm.sidecarNumber" -}}
{{- if .int -}}{{- printf "%d" (int64 .value) -}}{{- else if eq (float64 .value) (floor (float64 .value)) -}}{{- printf "%d" (int64 .value) -}}{{- else -}}{{- toString .value -}}{{- end -}}
{{- end -}}

{{/* The sidecar's arguments, as a JSON list. */}}
{{- define "vllm-rocm.sidecarArgs" -}}
{{- $v := .Values -}}
{{- $e := include "vllm-rocm.effective" . | fromJson -}}
{{- $ref := include "vllm-rocm.accuracyReference" . | fromJson -}}
{{- $args := list "serve" "--log-source" "k8s" "--k8s-container" "vllm"
  "--vllm-url" (printf "http://127.0.0.1:%v" $v.vllm.port) "--listen" (printf "0.0.0.0:%v" $v.sidecar.port)
  "--model" (include "vllm-rocm.servedName" .) -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- /* A mode decided at run time is the report's recommendation, which the sidecar expects without the flag. */ -}}
{{- if not $src.runtimeMode -}}
{{- $args = concat $args (list "--expected-mode" $e.configMode) -}}
{{- end -}}
{{- with $src.gpuProduct -}}
{{- $args = concat $args (list "--gpu-product" .) -}}
{{- end -}}
{{- with $v.allowKnownIssues -}}
{{- $args = concat $args (list "--allow-known-issues" (join "," .)) -}}
{{- end -}}
{{- if eq $ref.kind "disabled" -}}
{{- $args = append $args "--no-canary-enabled" -}}
{{- else if $ref.flag -}}
{{- $args = concat $args (list $ref.flag $ref.path) -}}
{{- end -}}
{{- range $s := include "vllm-rocm.sidecarSettings" . | fromYamlArray -}}
{{- $x := index $v.sidecar $s.value -}}
{{- if not (and $s.zero (eq (float64 $x) 0.0)) -}}
{{- $args = concat $args (list $s.flag (include "vllm-rocm.sidecarNumber" (dict "value" $x "int" $s.int))) -}}
{{- end -}}
{{- end -}}
{{- range $v.sidecar.extraArgs -}}
{{- $args = append $args (toString .) -}}
{{- end -}}
{{- toJson $args -}}
{{- end -}}

{{/* Refusals (JSON list) for sidecar.extraArgs and sidecar.extraEnv: anything but the harmless settings. */}}
{{- define "vllm-rocm.sidecarRefusals" -}}
{{- $ok := include "vllm-rocm.sidecarHarmless" . | fromYaml -}}
{{- $owners := include "vllm-rocm.sidecarFlagOwners" . | fromYaml -}}
{{- $allowed := printf "sidecar.extraArgs may set only %s; every other flag of the sidecar can change what /readyz says" (join ", " $ok.flags) -}}
{{- $out := list -}}
{{- range $i, $a := .Values.sidecar.extraArgs -}}
{{- $arg := toString $a -}}
{{- if hasPrefix "-" $arg -}}
{{- $name := regexReplaceAll "=.*$" $arg "" -}}
{{- if not (has $name $ok.flags) -}}
{{- $owner := index $owners $name -}}
{{- if not $owner -}}
{{- range $flag := include "vllm-rocm.sidecarSettings" $ | fromYamlArray -}}
{{- if eq $name $flag.flag -}}{{- $owner = printf "sidecar.%s" $flag.value -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $out = append $out (printf "sidecar.extraArgs[%d] %q: %s%s" $i $arg $allowed (ternary (printf " (set %s instead)" $owner) "" (ne (toString $owner) ""))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $e := .Values.sidecar.extraEnv -}}
{{- $name := toString $e.name -}}
{{- if not (has $name $ok.env) -}}
{{- $out = append $out (printf "sidecar.extraEnv[%d] %s: sidecar.extraEnv may set only %s; every flag of the sidecar has a VLLM_HEALTH_* twin, and the sidecar's other variables (POD_NAME, proxies, the API server, Python's) decide whom it asks and what it runs" $i $name (join ", " $ok.env)) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
