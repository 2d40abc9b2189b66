{{/*
What the kubelet and a wrapper do to the command line the guard judged. The guard reads the values; between them and
vLLM stand the kubelet, which expands `$(VAR)` in command, args and env values from the container's environment
(k8s.io/kubernetes third_party/forked/golang/expansion: `$(NAME)` is replaced when NAME is defined, `$$` is a
literal `$`, anything else is left as is), and whatever vllm.command runs. So the chart refuses a `$(` the kubelet
would read as a reference in anything it renders into a container, and judges vllm.command against the entrypoints
whose arguments are `vllm serve`'s (files/vllm-settings.yaml `entrypoints`).
*/}}

{{/* A string the kubelet would expand: an unescaped `$(` (after any number of `$$` pairs). */}}
{{- define "vllm-rocm.kubeletRefPattern" -}}(^|[^$])(\$\$)*\$\({{- end -}}

{{/* Refusals (JSON list) for `$(` in what the chart renders into the vLLM and sidecar containers. */}}
{{- define "vllm-rocm.kubeletRefusals" -}}
{{- $pattern := include "vllm-rocm.kubeletRefPattern" . -}}
{{- $why := "the kubelet expands $(VAR) from the container's environment (which a ConfigMap or Secret can fill) after the chart judged the text, so vLLM would run something the guard never saw; write $$( for a literal $(" -}}
{{- $out := list -}}
{{- range $i, $a := .Values.vllm.command -}}
{{- if regexMatch $pattern (toString $a) -}}
{{- $out = append $out (printf "vllm.command[%d] %q: %s" $i (toString $a) $why) -}}
{{- end -}}
{{- end -}}
{{- $nExtra := len .Values.extraArgs -}}
{{- $args := include "vllm-rocm.serveArgs" . | fromYamlArray -}}
{{- /* The one reference the chart writes itself: the mode from the qualification ConfigMap (vllm-rocm.vllmModeEnv). */ -}}
{{- $own := printf "\"cudagraph_mode\":\"$(%s)\"" (include "vllm-rocm.runtimeModeVar" .) -}}
{{- range $i, $a := $args -}}
{{- if regexMatch $pattern (replace $own "" (toString $a)) -}}
{{- $k := sub (len $args) $i -}}
{{- if le $k $nExtra -}}
{{- $out = append $out (printf "extraArgs[%d] %q: %s" (sub $nExtra $k) (toString $a) $why) -}}
{{- else if eq $i 0 -}}
{{- $out = append $out (printf "model.name %q (vLLM's model argument): %s" (toString $a) $why) -}}
{{- else -}}
{{- $out = append $out (printf "the value %q of vLLM's %s (from the typed values): %s" (toString $a) (index $args (sub $i 1)) $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $e := include "vllm-rocm.vllmEnv" . | fromYamlArray -}}
{{- if and (hasKey $e "value") (regexMatch $pattern (toString $e.value)) -}}
{{- $out = append $out (printf "the vLLM container's env %s=%q (extraEnv or a typed value): %s" $e.name (toString $e.value) $why) -}}
{{- end -}}
{{- end -}}
{{- $side := include "vllm-rocm.sidecarArgs" . | fromJsonArray -}}
{{- range $i, $a := $side -}}
{{- if regexMatch $pattern (toString $a) -}}
{{- $out = append $out (printf "the sidecar argument %q (%s): %s" (toString $a) (ternary (printf "after %s" (index $side (sub $i 1))) "first" (gt $i 0)) $why) -}}
{{- end -}}
{{- end -}}
{{- range $i, $e := .Values.sidecar.extraEnv -}}
{{- if and (kindIs "map" $e) (hasKey $e "value") (regexMatch $pattern (toString $e.value)) -}}
{{- $out = append $out (printf "sidecar.extraEnv[%d] %s=%q: %s" $i (toString $e.name) (toString $e.value) $why) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The entrypoint vllm.command starts with, as JSON {name, rest (index of the first item after it)}, or {} for a
wrapper. An absolute path inside a volume the vLLM container can write is a wrapper: anything may have put it there. */}}
{{- define "vllm-rocm.entrypoint" -}}
{{- $data := include "vllm-rocm.settingsData" . | fromYaml -}}
{{- $cmd := .Values.vllm.command -}}
{{- $found := dict -}}
{{- range $ep := $data.entrypoints -}}
{{- if and (not $found) (ge (len $cmd) (len $ep.words)) -}}
{{- $ok := true -}}
{{- range $i, $w := $ep.words -}}
{{- if not (regexMatch $w (toString (index $cmd $i))) -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- if $ok -}}{{- $found = dict "name" $ep.name "rest" (len $ep.words) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $found -}}
{{- $first := toString (index $cmd 0) -}}
{{- range $dir := include "vllm-rocm.vllmWritableDirs" . | fromJsonArray -}}
{{- if hasPrefix (printf "%s/" (trimSuffix "/" $dir)) $first -}}{{- $found = dict -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $found -}}
{{- end -}}

{{/* Directories the vLLM container can write (its volumes; the root filesystem is read-only by default). */}}
{{- define "vllm-rocm.vllmWritableDirs" -}}
{{- $dirs := list "/dev/shm" "/tmp" (include "vllm-rocm.vllmHome" .) .Values.modelCache.mountPath -}}
{{- if .Values.compileCache.enabled -}}{{- $dirs = append $dirs .Values.compileCache.mountPath -}}{{- end -}}
{{- toJson $dirs -}}
{{- end -}}

{{/* Refusals (JSON list) for vllm.command and for the variables that pick the program: a wrapper unless
vllm.commandIsWrapper acknowledges it (and then the acknowledgement must be needed). */}}
{{- define "vllm-rocm.commandRefusals" -}}
{{- $data := include "vllm-rocm.settingsData" . | fromYaml -}}
{{- $wrapper := default false .Values.vllm.commandIsWrapper -}}
{{- $ep := include "vllm-rocm.entrypoint" . | fromJson -}}
{{- $out := list -}}
{{- $known := list -}}
{{- range $data.entrypoints -}}{{- $known = append $known .name -}}{{- end -}}
{{- if and (not $ep) (not $wrapper) -}}
{{- $out = append $out (printf "vllm.command %s is not a vLLM entrypoint the chart knows (%s; a path inside a volume vLLM can write does not count): the render-time guard judges the arguments of `vllm serve` and cannot see what a shell, `env VAR=...`, numactl or a script runs or adds. Use one of those, or set vllm.commandIsWrapper=true to acknowledge that only the sidecar's runtime checks (the mode vLLM logs, known issues, the canary) protect this pod" (toJson .Values.vllm.command) (join "; " $known)) -}}
{{- end -}}
{{- if and $ep $wrapper -}}
{{- $out = append $out (printf "vllm.commandIsWrapper=true, but vllm.command %s is %s, which the guard judges: drop vllm.commandIsWrapper (it would switch judgments off for nothing)" (toJson .Values.vllm.command) $ep.name) -}}
{{- end -}}
{{- if not $wrapper -}}
{{- range $i, $e := .Values.extraEnv -}}
{{- if has (toString $e.name) $data.programEnv -}}
{{- $out = append $out (printf "extraEnv[%d] %s decides which program runs or loads code into it before vLLM reads its arguments: a wrapper in all but name. Set vllm.commandIsWrapper=true to acknowledge that the guard cannot see what runs" $i (toString $e.name)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
