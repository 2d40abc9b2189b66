{{/*
Pod-level bounds: the sandbox (seccomp, AppArmor, SELinux) is not weakened anywhere a value can reach it, and a
not-ready verdict of the sidecar reaches the Service within five minutes. The schema refuses what it can express
(seccomp and AppArmor `Unconfined` in the security contexts, the probe fields' ranges); the rest is here.
*/}}

{{/* SELinux types that lift the confinement a container normally runs under (container_t): spc_t is
container-selinux's "super privileged container", unconfined_t / unconfined_service_t are the targeted policy's
unconfined domains, container_runtime_t is the container engine's own domain, which may act on every container. */}}
{{- define "vllm-rocm.unconfinedSelinuxType" -}}^(spc_t|unconfined_t|unconfined_service_t|container_runtime_t)$|unconfined{{- end -}}

{{/* Refusals (JSON list) for sandbox weakening and an unbounded readiness probe. */}}
{{- define "vllm-rocm.podRefusals" -}}
{{- $out := list -}}
{{- $selinux := include "vllm-rocm.unconfinedSelinuxType" . -}}
{{- $contexts := list (list "podSecurityContext" .Values.podSecurityContext) (list "securityContext" .Values.securityContext) (list "sidecar.securityContext" .Values.sidecar.securityContext) -}}
{{- range $c := $contexts -}}
{{- $where := index $c 0 -}}
{{- $ctx := default dict (index $c 1) -}}
{{- with $ctx.seLinuxOptions -}}
{{- if regexMatch $selinux (lower (toString (default "" .type))) -}}
{{- $out = append $out (printf "%s.seLinuxOptions.type=%s: an unconfined SELinux domain takes the container out of the policy that confines it (like seccomp Unconfined, which the schema refuses); leave it unset (container_t) or use a confined type of your policy" $where (toString .type)) -}}
{{- end -}}
{{- end -}}
{{- with $ctx.appArmorProfile -}}
{{- if eq (lower (toString (default "" .type))) "unconfined" -}}
{{- $out = append $out (printf "%s.appArmorProfile.type=%s: no AppArmor confinement; use RuntimeDefault or Localhost" $where (toString .type)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k, $val := .Values.podAnnotations -}}
{{- $legacy := or (hasPrefix "container.apparmor.security.beta.kubernetes.io/" $k) (eq $k "seccomp.security.alpha.kubernetes.io/pod") (hasPrefix "container.seccomp.security.alpha.kubernetes.io/" $k) -}}
{{- if and $legacy (eq (lower (trim (toString $val))) "unconfined") -}}
{{- $out = append $out (printf "podAnnotations %s=%s: the annotation form of AppArmor/seccomp Unconfined, which the security contexts refuse; use RuntimeDefault or a Localhost profile (securityContext.appArmorProfile / seccompProfile)" $k (toString $val)) -}}
{{- end -}}
{{- end -}}
{{- $r := .Values.probes.readiness -}}
{{- $reaction := mul (int $r.failureThreshold) (max (int $r.periodSeconds) (int $r.timeoutSeconds)) -}}
{{- if gt $reaction 300 -}}
{{- $out = append $out (printf "probes.readiness: failureThreshold * max(periodSeconds, timeoutSeconds) = %d * %d = %d s: a server the sidecar found answering wrong would stay in the Service that long; keep it at most 300 s" (int $r.failureThreshold) (max (int $r.periodSeconds) (int $r.timeoutSeconds)) $reaction) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
