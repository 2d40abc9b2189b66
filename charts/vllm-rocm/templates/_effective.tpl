{{/*
The effective compilation settings: what vLLM will actually read, computed in one place from the typed values
(compilation.*, enforceEager, attentionBackend, aiter.*, speculativeConfig, kvCacheDtype, maxNumSeqs,
tensorParallelSize) with the meaning the deployed release gives them. Returns JSON; consumers use
`include "vllm-rocm.effective" . | fromJson` (the guard, the sidecar's --expected-mode, NOTES, the pod annotation).

Keys: release/releaseMinor/releasePatch, patched, requestedMode (compilation.cudagraphMode, or the qualification report's mode: _qualification.tpl), configMode (the
cudagraph_mode vLLM's config holds once its own config rules ran: what its log line shows), mode (the graph
behaviour the guard judges: configMode, or FULL when attention ends up inside piecewise graphs), modeChanges (why
they differ), eager, compileMode (0-3; 3 = VLLM_COMPILE / level 3) and compileModeKey, splittingOps,
attentionInPiecewiseGraphs, captureSizes, maxCaptureSize, attentionBackend, aiterFA, aiter, kvCacheDtype,
speculative, numSpeculativeTokens, maxNumSeqs, tensorParallelSize, compilationConfig (the --compilation-config map),
the facts the known-issues guard judges ("" = unknown to the chart; templates/_known_issues.tpl): backend and
backendFrom (attentionBackend, or vLLM's automatic choice up to 0.18: _known_issues.tpl vllm-rocm.attentionBackend), rocmVersion, gpuArch, quantization,
speculativeMethod, vllmEnv (the VLLM_* variables the container sets) and vllmEnvUnknown (those from valueFrom),
and refusals: every value, extraArgs/vllm.command item or extraEnv variable that would make vLLM read something
else than these (the guard fails on any).

Release facts used here (each re-derived from the released files by tests/charts/test_guard.py):
- cudagraph_mode exists from 0.10.1 (0.10.0 has use_cudagraph/full_cuda_graph and ignores unknown keys).
- The compile setting is `level` up to 0.11 and `mode` from 0.12 (level is read as mode until 0.17, removed in 0.18).
- A piecewise cudagraph_mode without VLLM_COMPILE: vLLM refuses to start up to 0.11, overrides to NONE in
  0.12-0.29, and from 0.30 drops the piecewise part (PIECEWISE -> NONE, FULL_AND_PIECEWISE -> FULL_DECODE_ONLY).
- `splitting_ops: []`: up to 0.11 PIECEWISE is treated as FULL; from 0.12 PIECEWISE -> NONE and
  FULL_AND_PIECEWISE -> FULL. 0.12+ `pass_config.fuse_attn_quant` with default splitting_ops does the latter too.
*/}}
{{- define "vllm-rocm.effective" -}}
{{- $v := .Values -}}
{{- $data := include "vllm-rocm.settingsData" . | fromYaml -}}
{{- $rel := include "vllm-rocm.release" . -}}
{{- $patch := include "vllm-rocm.releasePatch" . -}}
{{- $before012 := semverCompare "<0.12.0-0" $rel -}}
{{- $refusals := list -}}
{{- $changes := list -}}
{{- $user := default dict $v.compilation.compilationConfig -}}
{{- $requested := include "vllm-rocm.cudagraphMode" . -}}
{{- $eager := $v.enforceEager -}}
{{- $piecewise := list "PIECEWISE" "FULL_AND_PIECEWISE" -}}

{{- if semverCompare "<0.10.1-0" $patch -}}
{{- $refusals = append $refusals (printf "vllm.release=%s: vLLM before 0.10.1 has no cudagraph_mode (0.10.0 sets graphs with use_cudagraph/full_cuda_graph and silently ignores unknown compilation keys), so compilation.cudagraphMode would not apply; use an image with vLLM 0.10.1 or later" (toString $v.vllm.release)) -}}
{{- end -}}
{{- range $key := list "use_cudagraph" "full_cuda_graph" "max_capture_size" -}}
{{- if hasKey $user $key -}}
{{- $refusals = append $refusals (printf "compilation.compilationConfig.%s: the deprecated (up to 0.11) or removed (0.12+) way to set the graph mode or sizes; use compilation.cudagraphMode and compilation.captureSizes" $key) -}}
{{- end -}}
{{- end -}}

{{- /* Compile mode: 3 (VLLM_COMPILE / level 3, piecewise) unless eager or set in compilationConfig. */ -}}
{{- $compile := ternary 0 3 $eager -}}
{{- $modeKey := "" -}}
{{- if $before012 -}}
{{- if hasKey $user "mode" -}}
{{- $refusals = append $refusals (printf "compilation.compilationConfig.mode: vLLM %s has no `mode` (it came in 0.12) and silently ignores unknown keys; use level (0-3)" $patch) -}}
{{- end -}}
{{- if hasKey $user "level" -}}{{- $modeKey = "level" -}}{{- end -}}
{{- else if hasKey $user "mode" -}}
{{- $modeKey = "mode" -}}
{{- else if hasKey $user "level" -}}
{{- if semverCompare ">=0.18.0-0" $rel -}}
{{- $refusals = append $refusals (printf "compilation.compilationConfig.level: removed in vLLM 0.18 (vLLM %s rejects it); use mode (0-3 or NONE, STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE, VLLM_COMPILE)" $patch) -}}
{{- else -}}
{{- $modeKey = "level" -}}
{{- end -}}
{{- end -}}
{{- if $modeKey -}}
{{- $raw := index $user $modeKey -}}
{{- $n := -1 -}}
{{- $names := dict "NONE" 0 "STOCK_TORCH_COMPILE" 1 "DYNAMO_TRACE_ONCE" 2 "VLLM_COMPILE" 3 -}}
{{- if kindIs "string" $raw -}}
{{- if and (eq $modeKey "mode") (hasKey $names (upper $raw)) -}}{{- $n = index $names (upper $raw) -}}{{- end -}}
{{- else if or (kindIs "int" $raw) (kindIs "int64" $raw) (kindIs "float64" $raw) -}}
{{- if eq (float64 $raw) (float64 (int $raw)) -}}{{- $n = int $raw -}}{{- end -}}
{{- end -}}
{{- if or (lt $n 0) (gt $n 3) -}}
{{- $refusals = append $refusals (printf "compilation.compilationConfig.%s=%v: must be 0-3%s" $modeKey $raw (ternary " or a CompilationMode name" "" (eq $modeKey "mode"))) -}}
{{- else -}}
{{- $compile = $n -}}
{{- end -}}
{{- end -}}

{{- /* The mode vLLM's config will hold (configMode) and the graph behaviour the guard judges (mode). */ -}}
{{- $config := $requested -}}
{{- $attnInPiece := false -}}
{{- $partition := and (not (semverCompare "<0.11.0-0" $rel)) (eq (toString (index $user "use_inductor_graph_partition")) "true") -}}
{{- if $eager -}}
{{- $config = "NONE" -}}
{{- if ne $requested "NONE" -}}
{{- $changes = append $changes "enforceEager=true: no torch.compile and no CUDA graphs" -}}
{{- end -}}
{{- else if and (ne (int $compile) 3) (has $requested $piecewise) -}}
{{- if $before012 -}}
{{- $refusals = append $refusals (printf "compilation.cudagraphMode=%s needs piecewise compilation: vLLM %s refuses to start with compilation.compilationConfig.%s=%d (it asserts level 3); use FULL, FULL_DECODE_ONLY or NONE, or level 3" $requested $patch $modeKey (int $compile)) -}}
{{- else if semverCompare "<0.30.0-0" $rel -}}
{{- $config = "NONE" -}}
{{- $changes = append $changes (printf "compile %s %d is not VLLM_COMPILE: vLLM %s overrides %s to NONE" $modeKey (int $compile) $patch $requested) -}}
{{- else -}}
{{- $config = ternary "NONE" "FULL_DECODE_ONLY" (eq $requested "PIECEWISE") -}}
{{- $changes = append $changes (printf "compile %s %d is not VLLM_COMPILE: vLLM %s drops the piecewise part, %s becomes %s" $modeKey (int $compile) $patch $requested $config) -}}
{{- end -}}
{{- else if and (eq (int $compile) 3) (hasKey $user "splitting_ops") (not $partition) -}}
{{- $ops := index $user "splitting_ops" -}}
{{- if not (kindIs "slice" $ops) -}}
{{- $refusals = append $refusals (printf "compilation.compilationConfig.splitting_ops=%v: must be a list of op names" $ops) -}}
{{- else if empty $ops -}}
{{- if $before012 -}}
{{- if eq $requested "PIECEWISE" -}}
{{- $config = "FULL" -}}
{{- $changes = append $changes (printf "splitting_ops=[]: vLLM %s treats PIECEWISE as FULL (one piece holding attention)" $patch) -}}
{{- else if eq $requested "FULL_AND_PIECEWISE" -}}
{{- $attnInPiece = true -}}
{{- end -}}
{{- else if eq $requested "PIECEWISE" -}}
{{- $config = "NONE" -}}
{{- $changes = append $changes (printf "splitting_ops=[]: vLLM %s sets PIECEWISE to NONE (no piece left to capture)" $patch) -}}
{{- else if eq $requested "FULL_AND_PIECEWISE" -}}
{{- $config = "FULL" -}}
{{- $changes = append $changes (printf "splitting_ops=[]: vLLM %s sets FULL_AND_PIECEWISE to FULL" $patch) -}}
{{- end -}}
{{- else -}}
{{- $need := list -}}
{{- range $entry := $data.attentionSplitOps -}}
{{- if and (not $need) (or (not $entry.before) (semverCompare (printf "<%s-0" $entry.before) $rel)) -}}
{{- $need = $entry.ops -}}
{{- end -}}
{{- end -}}
{{- range $op := $need -}}
{{- if not (has $op $ops) -}}{{- $attnInPiece = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- else if and (eq (int $compile) 3) (not $before012) (not $partition) (not (hasKey $user "splitting_ops")) (has $requested $piecewise) -}}
{{- $pass := index $user "pass_config" -}}
{{- if and (kindIs "map" $pass) (eq (toString (index $pass "fuse_attn_quant")) "true") -}}
{{- $config = "FULL" -}}
{{- $changes = append $changes (printf "pass_config.fuse_attn_quant=true: vLLM %s empties splitting_ops and sets %s to FULL" $patch $requested) -}}
{{- end -}}
{{- end -}}
{{- $mode := $config -}}
{{- if and $attnInPiece (has $config $piecewise) -}}
{{- $mode = "FULL" -}}
{{- $changes = append $changes (printf "splitting_ops=%s leaves attention inside the piecewise graphs, which then capture it as full graphs do: judged as FULL" (toJson (index $user "splitting_ops"))) -}}
{{- end -}}

{{- /* Anything outside the typed values that would set these behind the guard's back. */ -}}
{{- /* A wrapper's items are not vLLM's (templates/_command.tpl); its vLLM arguments are still judged. */ -}}
{{- range $i, $a := ternary (list) $v.vllm.command (eq (toString $v.vllm.commandIsWrapper) "true") -}}
{{- with include "vllm-rocm.argRefusal" (dict "arg" (toString $a) "data" $data) -}}
{{- $refusals = append $refusals (printf "vllm.command[%d] %q %s" $i (toString $a) .) -}}
{{- end -}}
{{- end -}}
{{- range $i, $a := $v.extraArgs -}}
{{- with include "vllm-rocm.argRefusal" (dict "arg" (toString $a) "data" $data) -}}
{{- $refusals = append $refusals (printf "extraArgs[%d] %q %s" $i (toString $a) .) -}}
{{- end -}}
{{- end -}}
{{- range $i, $e := $v.extraEnv -}}
{{- with include "vllm-rocm.envRefusal" (dict "name" (toString $e.name) "value" $e.value "from" (hasKey $e "valueFrom") "data" $data) -}}
{{- $refusals = append $refusals (printf "extraEnv[%d] %s %s" $i (toString $e.name) .) -}}
{{- end -}}
{{- end -}}

{{- $spec := default dict $v.speculativeConfig -}}
{{- /* The facts the known-issues guard judges (templates/_known_issues.tpl); "" = the chart does not know it. */ -}}
{{- $arch := lower (trim (first (splitList ":" (toString $v.rocm.gpuArch)))) -}}
{{- $specMethod := "none" -}}
{{- if $spec -}}{{- $specMethod = lower (toString (default "" (index $spec "method"))) -}}{{- end -}}
{{- $env := dict "VLLM_ROCM_USE_AITER" (ternary "1" "0" $v.aiter.enabled) "VLLM_ROCM_USE_AITER_MHA" (ternary "1" "0" $v.aiter.mha) -}}
{{- $envUnknown := list -}}
{{- range $e := $v.extraEnv -}}
{{- $name := toString $e.name -}}
{{- if hasPrefix "VLLM_" $name -}}
{{- if hasKey $e "valueFrom" -}}
{{- $_ := unset $env $name -}}
{{- $envUnknown = append $envUnknown $name -}}
{{- else -}}
{{- $_ := set $env $name (toString (default "" $e.value)) -}}
{{- $envUnknown = without $envUnknown $name -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* vLLM's attention backend: attentionBackend, or its automatic choice (known_issues.infer_attention_backend). */ -}}
{{- $inferred := include "vllm-rocm.attentionBackend" (dict "version" (include "vllm-rocm.pep440Parse" (toString $v.vllm.release) | fromJson) "arch" $arch "env" $env "explicit" $v.attentionBackend) | fromJson -}}
{{- $backend := $inferred.name -}}
{{- $backendFrom := $inferred.from -}}
{{- /* AITER FA, or possibly AITER FA when the choice is unknown and AITER MHA is on (the spec-decode rule, _helpers.tpl). */ -}}
{{- $aiterFA := or (eq $backend "ROCM_AITER_FA") (and (not $backend) $v.aiter.enabled $v.aiter.mha (semverCompare "<0.20.0-0" $rel)) -}}
{{- $eff := dict
  "release" (toString $v.vllm.release) "releaseMinor" $rel "releasePatch" $patch "patched" $v.vllm.patched
  "requestedMode" $requested "configMode" $config "mode" $mode "modeChanges" $changes
  "eager" $eager "compileMode" (int $compile) "compileModeKey" $modeKey
  "splittingOps" (index $user "splitting_ops") "attentionInPiecewiseGraphs" (and $attnInPiece (has $config $piecewise))
  "captureSizes" $v.compilation.captureSizes "maxCaptureSize" (index $user "max_cudagraph_capture_size")
  "attentionBackend" $v.attentionBackend "aiterFA" $aiterFA
  "aiter" (dict "enabled" $v.aiter.enabled "mha" $v.aiter.mha)
  "kvCacheDtype" $v.kvCacheDtype "speculative" (not (empty $spec))
  "numSpeculativeTokens" (int (default 0 (index $spec "num_speculative_tokens")))
  "maxNumSeqs" (int $v.maxNumSeqs) "tensorParallelSize" (int $v.tensorParallelSize)
  "compilationConfig" (include "vllm-rocm.compilationConfig" . | fromJson)
  "rocmVersion" (toString $v.rocm.version) "gpuArch" $arch "backend" $backend "backendFrom" $backendFrom
  "quantization" (lower (toString $v.quantization)) "speculativeMethod" $specMethod
  "vllmEnv" $env "vllmEnvUnknown" (uniq $envUnknown)
  "refusals" $refusals -}}
{{- toJson $eff -}}
{{- end -}}

{{/* The effective settings on the pod, for people and tools (`kubectl get pod -o jsonpath=...`). */}}
{{- define "vllm-rocm.effectiveAnnotation" -}}
{{- $e := include "vllm-rocm.effective" . | fromJson -}}
{{- $_ := unset $e "refusals" -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- if $src.runtimeMode -}}
{{- /* The settings above were judged for each of these modes; the ConfigMap picks one as the pod starts. */ -}}
{{- $_ := set $e "modeFrom" (dict "configMap" $src.configMap "candidates" (include "vllm-rocm.qualificationCandidates" . | fromJson).modes) -}}
{{- $_ := unset $e "requestedMode" -}}
{{- $_ := unset $e "mode" -}}
{{- $_ := unset $e "configMode" -}}
{{- end -}}
vllm-rocm/effective-settings: {{ toJson $e | quote }}
{{- end -}}

{{- define "vllm-rocm.settingsData" -}}
{{- $text := .Files.Get "files/vllm-settings.yaml" -}}
{{- if not $text -}}{{- fail "files/vllm-settings.yaml is missing from the chart" -}}{{- end -}}
{{- /* A file that does not parse would leave every list empty and the guard refusing nothing. */ -}}
{{- with (fromYaml $text).Error -}}{{- fail (printf "files/vllm-settings.yaml does not parse: %s" .) -}}{{- end -}}
{{- $text -}}
{{- end -}}

{{/*
Why one command-line item would change a setting the typed values own, or "". vLLM's FlexibleArgumentParser reads
`--a_b` as `--a-b` up to the first `.`, gathers `--opt.key v` / `-o.key=v` into `--opt '{"key": v}'`, and argparse
takes `--opt=v`, `--no-opt` (booleans) and unique prefixes (`--compilation`, `-c` for `-cc`). So: drop `=...` and
`.key`, read `_` as `-`, and refuse the item when it is an owned option, a prefix of one (or of its `--no-` form),
starts with a single-dash one (`-O3`), or is a long option containing a flagWords word (not allowedFlags).
*/}}
{{- define "vllm-rocm.argRefusal" -}}
{{- $arg := trim .arg -}}
{{- $data := .data -}}
{{- if and (hasPrefix "-" $arg) (gt (len $arg) 1) (ne $arg "--") -}}
{{- $name := regexReplaceAll "[=.].*$" $arg "" -}}
{{- $long := hasPrefix "--" $name -}}
{{- if $long -}}{{- $name = replace "_" "-" $name -}}{{- end -}}
{{- $hit := "" -}}
{{- range $entry := $data.flags -}}
{{- range $opt := $entry.options -}}
{{- if not $hit -}}
{{- $match := false -}}
{{- if hasPrefix "--" $opt -}}
{{- $match = and $long (gt (len $name) 2) (or (hasPrefix $name $opt) (hasPrefix $name (printf "--no-%s" (trimPrefix "--" $opt)))) -}}
{{- else -}}
{{- $match = and (not $long) (gt (len $name) 1) (or (hasPrefix $name $opt) (hasPrefix $opt $name)) -}}
{{- end -}}
{{- if $match -}}
{{- $hit = printf "is vLLM's %s, which sets %s: %s" $opt $entry.what (ternary (printf "set %s instead" $entry.use) "the chart does not support changing it" (ne $entry.use "")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not $hit) $long -}}
{{- $allowed := false -}}
{{- range $a := $data.allowedFlags -}}
{{- if or (eq $name $a.option) (eq $name (printf "--no-%s" (trimPrefix "--" $a.option))) -}}{{- $allowed = true -}}{{- end -}}
{{- end -}}
{{- if not $allowed -}}
{{- range $word := $data.flagWords -}}
{{- if and (not $hit) (contains $word $name) -}}
{{- $hit = printf "names a compilation or CUDA-graph setting (%q): set %s instead" $word $data.flagWordsUse -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $hit -}}
{{- end -}}
{{- end -}}

{{/* Why one extraEnv variable would change a setting the typed values own, or "". */}}
{{- define "vllm-rocm.envRefusal" -}}
{{- $name := .name -}}
{{- $data := .data -}}
{{- $hit := "" -}}
{{- range $entry := $data.env -}}
{{- if and (not $hit) (has $name $entry.names) -}}
{{- /* allowedValues: values that change nothing the guard or the sidecar relies on; a valueFrom is unknown. */ -}}
{{- if not (and $entry.allowedValues (not $.from) (has (upper (trim (toString (default "" $.value)))) $entry.allowedValues)) -}}
{{- $hit = printf "sets %s: %s" $entry.what (ternary (printf "set %s instead" $entry.use) "the chart does not support changing it" (ne $entry.use "")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $hit -}}
{{- $allowed := false -}}
{{- range $a := $data.allowedEnv -}}
{{- if eq $name $a.name -}}{{- $allowed = true -}}{{- end -}}
{{- end -}}
{{- if not $allowed -}}
{{- range $word := $data.envWords -}}
{{- if and (not $hit) (contains $word $name) -}}
{{- $hit = printf "names a compilation or CUDA-graph setting (%q): set %s instead" $word $data.envWordsUse -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $hit -}}
{{- end -}}

{{/* Bytes of a Kubernetes quantity ("64Gi", "500M", "68719476736"), or "" when the chart cannot read it. */}}
{{- define "vllm-rocm.quantityBytes" -}}
{{- $q := trim (toString .) -}}
{{- $num := regexFind "^[0-9]+([.][0-9]+)?" $q -}}
{{- $suffix := trimPrefix $num $q -}}
{{- $mult := dict "" 1.0 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if and $num (hasKey $mult $suffix) -}}
{{- mulf (float64 $num) (index $mult $suffix) -}}
{{- end -}}
{{- end -}}
