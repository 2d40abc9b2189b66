{{- define "vllm-rocm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vllm-rocm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vllm-rocm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-rocm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The `helm test` pod's labels: selected by its NetworkPolicy and let in by the server's, never by the Service. */}}
{{- define "vllm-rocm.testSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-test" (include "vllm-rocm.name" .) }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end -}}

{{/* The qualification Job's labels: never the server's selector (the Service, the PDB and the NetworkPolicy select
servers only). */}}
{{- define "vllm-rocm.qualificationLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ printf "%s-qualify" (include "vllm-rocm.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: qualification
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* vllm.release as a label value (<= 63 of [-A-Za-z0-9_.], alphanumeric at both ends): ROCm builds carry local
versions ("0.10.2+rocm700", "0.10.2.dev383+g..."), whose "+" the API server refuses in a label. */}}
{{- define "vllm-rocm.versionLabel" -}}
{{- $v := regexReplaceAll "[^-A-Za-z0-9_.]" (toString .Values.vllm.release) "_" | trunc 63 -}}
{{- regexReplaceAll "^[^A-Za-z0-9]+|[^A-Za-z0-9]+$" $v "" -}}
{{- end -}}

{{- define "vllm-rocm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "vllm-rocm.selectorLabels" . }}
app.kubernetes.io/version: {{ include "vllm-rocm.versionLabel" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vllm-rocm
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "vllm-rocm.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Waivers of findings of the security scanner platform teams run (checkov; tests/security runs it on every value
set the chart tests render), as its skip annotations on the object it reports, each with the reason a reviewer reads.
README "Security" lists them. A reason may not contain "=" (checkov splits the annotation on it). */}}
{{- define "vllm-rocm.serverWaivers" -}}
checkov.io/skip1: "CKV_K8S_11=no CPU limit on purpose. On a GPU server CFS throttling stalls the threads that schedule and launch GPU work, which shows as token latency; resources.requests.cpu reserves the CPU, and resources.limits.cpu / sidecar.resources.limits.cpu set limits where wanted"
checkov.io/skip2: "CKV_K8S_9=pod readiness is the health sidecar's /readyz (graph capture done and the accuracy canary passed, which needs vLLM to answer correctly); vLLM's own /health is its startup and liveness probe"
{{- end -}}

{{/* The LeaderWorkerSet's Ray worker pods (no sidecar, no server). */}}
{{- define "vllm-rocm.rayWorkerWaivers" -}}
checkov.io/skip1: "CKV_K8S_11=no CPU limit on purpose. On a GPU server CFS throttling stalls the threads that schedule and launch GPU work, which shows as token latency; resources.requests.cpu reserves the CPU, and resources.limits.cpu sets a limit where wanted"
checkov.io/skip2: "CKV_K8S_9=a Ray worker serves no endpoint, so there is no readiness to probe; the Service selects the group's leader only, whose readiness is the health sidecar's /readyz"
checkov.io/skip3: "CKV_K8S_8=a Ray worker serves no endpoint to probe; a failed worker recreates the whole group (RecreateGroupOnPodRestart) and the leader's liveness probe on vLLM's /health sees a hung worker"
{{- end -}}

{{/* Annotations of the Deployment: commonAnnotations and the scanner waivers. */}}
{{- define "vllm-rocm.serverAnnotations" -}}
annotations:
  {{- toYaml (merge (include "vllm-rocm.serverWaivers" . | fromYaml) (deepCopy .Values.commonAnnotations)) | nindent 2 }}
{{- end -}}

{{- define "vllm-rocm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vllm-rocm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository[:tag][@digest]; the digest wins over the tag. */}}
{{- define "vllm-rocm.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .default .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "vllm-rocm.image" -}}
{{- include "vllm-rocm.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion) -}}
{{- end -}}

{{- define "vllm-rocm.sidecarImage" -}}
{{- include "vllm-rocm.imageRef" (dict "image" .Values.sidecar.image "default" .Chart.Version) -}}
{{- end -}}

{{- define "vllm-rocm.servedName" -}}
{{- default .Values.model.name .Values.model.servedName -}}
{{- end -}}

{{/* "major.minor" of vllm.release as a comparable semver. */}}
{{- define "vllm-rocm.release" -}}
{{- $parts := splitList "." (toString .Values.vllm.release) -}}
{{- printf "%s.%s.0" (index $parts 0) (index $parts 1) -}}
{{- end -}}

{{/* "major.minor.patch" of vllm.release (0.10.1.1 -> 0.10.1; a missing patch is 0). */}}
{{- define "vllm-rocm.releasePatch" -}}
{{- $parts := splitList "." (toString .Values.vllm.release) -}}
{{- $patch := "0" -}}
{{- if gt (len $parts) 2 -}}{{- $patch = default "0" (regexFind "^[0-9]+" (index $parts 2)) -}}{{- end -}}
{{- printf "%s.%s.%s" (index $parts 0) (index $parts 1) $patch -}}
{{- end -}}

{{/* /dev/shm size: explicit value or perGpuGi * TP + baseGi. */}}
{{- define "vllm-rocm.shmSize" -}}
{{- if .Values.shm.sizeLimit -}}
{{- .Values.shm.sizeLimit -}}
{{- else -}}
{{- printf "%dGi" (add (mul (int .Values.shm.perGpuGi) (int .Values.tensorParallelSize)) (int .Values.shm.baseGi)) -}}
{{- end -}}
{{- end -}}

{{/* Reject combinations known to be wrong, judged on the effective settings (templates/_effective.tpl), never on the
raw values: the known-issues data (templates/_known_issues.tpl) and the rules below it.
AITER FA graph support per release: 0.10.1.x NEVER (unpatched), 0.10.2 ALWAYS (unpatched: wrong), patched or 0.11..0.19
UNIFORM_SINGLE_TOKEN_DECODE (FULL is downgraded, spec decode falls back to PIECEWISE), 0.20+ UNIFORM_BATCH. The first
two are rows of the data; spec decode on AITER FA (vllm#31625, and the unverified 0.10.x row) stays a rule here. */}}
{{- define "vllm-rocm.validate" -}}
{{- $e := include "vllm-rocm.effective" . | fromJson -}}
{{- $refusals := $e.refusals -}}
{{- range $more := list "vllm-rocm.commandRefusals" "vllm-rocm.kubeletRefusals" "vllm-rocm.sidecarRefusals" "vllm-rocm.podRefusals" -}}
{{- $refusals = concat $refusals (include $more $ | fromJsonArray) -}}
{{- end -}}
{{- with $refusals -}}
{{- fail (printf "the chart refuses these values (every compilation and CUDA-graph setting goes through the typed values, which the chart's guard judges, and nothing may rewrite, wrap or loosen what it judged; see the chart README, \"CUDA graphs and compilation\" and \"What the sidecar is told\"):\n  - %s" (join "\n  - " .)) -}}
{{- end -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- with $src.problem -}}{{- fail . -}}{{- end -}}
{{- with include "vllm-rocm.qualificationJobProblem" . -}}{{- fail . -}}{{- end -}}
{{- if $src.runtimeMode -}}
{{- $cand := include "vllm-rocm.qualificationCandidates" . | fromJson -}}
{{- if not $cand.modes -}}
{{- fail (printf "qualification: the cudagraph mode comes from the ConfigMap %s when the pod starts, but the guard lets no mode through for these values, so any mode it named would be refused: %s" $src.configMap (join "; " $cand.refused)) -}}
{{- end -}}
{{- end -}}
{{- if and $e.attentionBackend (semverCompare "<0.14.0-0" $e.releaseMinor) -}}
{{- fail (printf "attentionBackend=%s needs vLLM >= 0.14 (vllm.release=%s has no --attention-backend flag; on 0.10.x/0.11 AITER FA is chosen by aiter.enabled + aiter.mha)" $e.attentionBackend $e.release) -}}
{{- end -}}
{{- with include "vllm-rocm.modeRefusal" (dict "root" . "e" $e) -}}
{{- fail . -}}
{{- end -}}
{{- if gt (int .Values.tensorParallelSize) (int .Values.gpusPerNode) -}}
{{- if .Values.multiNode.enabled -}}
{{- fail (printf "tensorParallelSize=%d is more than gpusPerNode=%d: with multiNode every pod (one per node) requests tensorParallelSize GPUs, so tensor parallelism must fit in one node; spread the model over nodes with multiNode.nodes (pipeline parallel) instead" (int .Values.tensorParallelSize) (int .Values.gpusPerNode)) -}}
{{- else -}}
{{- fail (printf "tensorParallelSize=%d is more than gpusPerNode=%d (the GPUs of one node): one pod cannot get them and would stay Pending. Use tensorParallelSize <= %d, or multiNode.enabled=true with multiNode.nodes=N (tensorParallelSize GPUs on each of N nodes, pipeline parallel across them)" (int .Values.tensorParallelSize) (int .Values.gpusPerNode) (int .Values.gpusPerNode)) -}}
{{- end -}}
{{- end -}}
{{- $rawLimit := "" -}}
{{- with .Values.resources.limits -}}{{- $rawLimit = default "" (index . "memory") -}}{{- end -}}
{{- if $rawLimit -}}
{{- $limit := ternary (printf "%.0f" (float64 $rawLimit)) (toString $rawLimit) (or (kindIs "float64" $rawLimit) (kindIs "int64" $rawLimit) (kindIs "int" $rawLimit)) -}}
{{- $limitBytes := include "vllm-rocm.quantityBytes" $limit -}}
{{- if not $limitBytes -}}
{{- fail (printf "resources.limits.memory=%s: not a Kubernetes quantity the chart can read (e.g. 64Gi, 68719476736), so it cannot check that /dev/shm fits under it" $limit) -}}
{{- end -}}
{{- $shm := include "vllm-rocm.shmSize" . -}}
{{- if ge (float64 (include "vllm-rocm.quantityBytes" $shm)) (float64 $limitBytes) -}}
{{- fail (printf "/dev/shm of %s (%s) is not smaller than the vLLM container's memory limit resources.limits.memory=%s: shared-memory pages count against that limit, so a full /dev/shm would get vLLM OOM-killed. Lower shm.sizeLimit (or shm.perGpuGi / shm.baseGi) or raise resources.limits.memory." $shm (ternary "shm.sizeLimit" (printf "shm.perGpuGi * tensorParallelSize + shm.baseGi = %d * %d + %d Gi" (int .Values.shm.perGpuGi) (int .Values.tensorParallelSize) (int .Values.shm.baseGi)) (ne .Values.shm.sizeLimit "")) $limit) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.multiNode.enabled .Values.autoscaling.hpa.enabled -}}
{{- fail "autoscaling.hpa is not supported with multiNode.enabled (a LeaderWorkerSet group spans nodes); use autoscaling.keda, which scales the LeaderWorkerSet" -}}
{{- end -}}
{{- if and .Values.autoscaling.hpa.enabled .Values.autoscaling.keda.enabled -}}
{{- fail "enable only one of autoscaling.hpa and autoscaling.keda (both would fight over the replica count)" -}}
{{- end -}}
{{- with include "vllm-rocm.qualificationConfigModeProblem" . -}}
{{- fail (printf "qualification: %s" .) -}}
{{- end -}}
{{- /* Last: with everything else in order, the accuracy gate (templates/_sidecar.tpl). */ -}}
{{- with (include "vllm-rocm.accuracyReference" . | fromJson).problem -}}
{{- fail . -}}
{{- end -}}
{{- end -}}

{{/* The --compilation-config JSON: cudagraph_mode + capture sizes + the free map. */}}
{{- define "vllm-rocm.compilationConfig" -}}
{{- $cc := deepCopy .Values.compilation.compilationConfig -}}
{{- if eq (include "vllm-rocm.qualificationRuntimeMode" .) "true" -}}
{{- /* The kubelet puts the ConfigMap's mode in (the env var below, vllm-rocm.vllmModeEnv). */ -}}
{{- $_ := set $cc "cudagraph_mode" (printf "$(%s)" (include "vllm-rocm.runtimeModeVar" .)) -}}
{{- else -}}
{{- $_ := set $cc "cudagraph_mode" (include "vllm-rocm.cudagraphMode" .) -}}
{{- end -}}
{{- if .Values.compilation.captureSizes -}}
{{- $_ := set $cc "cudagraph_capture_sizes" .Values.compilation.captureSizes -}}
{{- end -}}
{{- toJson $cc -}}
{{- end -}}

{{/* Arguments after vllm.command (model + flags), one list item each. */}}
{{- define "vllm-rocm.serveArgs" -}}
- {{ .Values.model.name | quote }}
- "--host"
- "0.0.0.0"
- "--port"
- {{ .Values.vllm.port | quote }}
- "--served-model-name"
- {{ include "vllm-rocm.servedName" . | quote }}
{{- with .Values.model.revision }}
- "--revision"
- {{ . | quote }}
{{- end }}
- "--tensor-parallel-size"
- {{ .Values.tensorParallelSize | quote }}
{{- if .Values.multiNode.enabled }}
- "--pipeline-parallel-size"
- {{ .Values.multiNode.nodes | quote }}
- "--distributed-executor-backend"
- "ray"
{{- end }}
- "--compilation-config"
- {{ include "vllm-rocm.compilationConfig" . | toJson }}
{{- if .Values.enforceEager }}
- "--enforce-eager"
{{- end }}
{{- with .Values.attentionBackend }}
- "--attention-backend"
- {{ . | quote }}
{{- end }}
{{- with .Values.speculativeConfig }}
- "--speculative-config"
- {{ toJson . | toJson }}
{{- end }}
{{- with .Values.kvCacheDtype }}
- "--kv-cache-dtype"
- {{ . | quote }}
{{- end }}
{{- if and .Values.quantization (ne .Values.quantization "none") }}
- "--quantization"
- {{ .Values.quantization | quote }}
{{- end }}
{{- if gt (int .Values.maxNumSeqs) 0 }}
- "--max-num-seqs"
- {{ .Values.maxNumSeqs | quote }}
{{- end }}
{{- if gt (int .Values.maxModelLen) 0 }}
- "--max-model-len"
- {{ .Values.maxModelLen | quote }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "vllm-rocm.vllmEnv" -}}
- name: VLLM_ROCM_USE_AITER
  value: {{ ternary "1" "0" .Values.aiter.enabled | quote }}
- name: VLLM_ROCM_USE_AITER_MHA
  value: {{ ternary "1" "0" .Values.aiter.mha | quote }}
- name: HOME
  value: {{ include "vllm-rocm.vllmHome" . | quote }}
- name: HF_HOME
  value: {{ .Values.modelCache.mountPath | quote }}
- name: VLLM_NO_USAGE_STATS
  value: "1"
{{- if .Values.compileCache.enabled }}
- name: VLLM_CACHE_ROOT
  value: {{ printf "%s/vllm" .Values.compileCache.mountPath | quote }}
- name: TORCHINDUCTOR_CACHE_DIR
  value: {{ printf "%s/inductor" .Values.compileCache.mountPath | quote }}
{{- end }}
{{- if .Values.hfToken.existingSecret }}
# The token as a file (huggingface_hub reads HF_TOKEN_PATH), never as an environment variable: environments leak
# into /proc/<pid>/environ, crash reports and child processes.
- name: HF_TOKEN_PATH
  value: {{ printf "%s/token" (include "vllm-rocm.hfTokenDir" .) | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* HOME of the vLLM container: the image's (docker/vllm-rocm/Dockerfile), set explicitly so that any runAsUser
finds it. Triton (~/.triton), MIOpen (~/.config/miopen, ~/.cache/miopen), AITER (~/.aiter when its package directory
is read-only), vLLM (~/.cache/vllm, ~/.config/vllm) and torch write below it. */}}
{{- define "vllm-rocm.vllmHome" -}}/home/vllm{{- end -}}
{{- define "vllm-rocm.hfTokenDir" -}}/var/run/secrets/huggingface{{- end -}}

{{/* Every place the vLLM container writes: the root filesystem is read-only (securityContext.readOnlyRootFilesystem),
so these volumes are all it can write to. */}}
{{- define "vllm-rocm.vllmVolumeMounts" -}}
- name: dshm
  mountPath: /dev/shm
- name: vllm-tmp
  mountPath: /tmp
- name: vllm-home
  mountPath: {{ include "vllm-rocm.vllmHome" . | quote }}
- name: model-cache
  mountPath: {{ .Values.modelCache.mountPath | quote }}
{{- if .Values.compileCache.enabled }}
- name: compile-cache
  mountPath: {{ .Values.compileCache.mountPath | quote }}
{{- end }}
{{- if .Values.hfToken.existingSecret }}
- name: hf-token
  mountPath: {{ include "vllm-rocm.hfTokenDir" . | quote }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "vllm-rocm.vllmResources" -}}
{{- $res := deepCopy .Values.resources -}}
{{- $req := default dict $res.requests -}}
{{- $lim := default dict $res.limits -}}
{{- $_ := set $req "amd.com/gpu" (int .Values.tensorParallelSize) -}}
{{- $_ := set $lim "amd.com/gpu" (int .Values.tensorParallelSize) -}}
{{- $_ := set $res "requests" $req -}}
{{- $_ := set $res "limits" $lim -}}
{{- toYaml $res -}}
{{- end -}}

{{- define "vllm-rocm.sidecar" -}}
- name: health
  image: {{ include "vllm-rocm.sidecarImage" . | quote }}
  imagePullPolicy: {{ .Values.sidecar.image.pullPolicy }}
  # The command, not only the arguments: the image's ENTRYPOINT already says `serve`, and args alone would be
  # appended to it (`serve serve ...`, refused by the parser; found by the first real kubelet run, tests/kube).
  command: ["vllm-rocm-health"]
  args:
    {{- include "vllm-rocm.sidecarArgs" . | fromJsonArray | toYaml | nindent 4 }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    # What vLLM does not log: the sidecar judges the known issues with the facts the chart's guard used.
    {{- with .Values.rocm.version }}
    - name: VLLM_HEALTH_ROCM_VERSION
      value: {{ . | quote }}
    {{- end }}
    {{- with .Values.rocm.gpuArch }}
    - name: VLLM_HEALTH_GPU_ARCH
      value: {{ . | quote }}
    {{- end }}
    {{- with .Values.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: health
      containerPort: {{ .Values.sidecar.port }}
      protocol: TCP
  # Pod readiness = the sidecar's /readyz: capture finished (or eager), vLLM runs the expected mode, no active known
  # issue, AND a canary pass on the current engine instance (unless canary.enabled=false).
  # It lives on this container because a named probe port resolves against the probed container's own ports.
  readinessProbe:
    httpGet:
      path: /readyz
      port: health
    periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
    failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
    timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: health
    periodSeconds: 20
    failureThreshold: 3
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    # The API token is mounted into this container only (the pod has automountServiceAccountToken: false).
    - name: kube-api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- if (include "vllm-rocm.accuracyReference" . | fromJson).configMap }}
    # The canary's accuracy reference: the baseline, or the qualification report that carries one.
    - name: canary-reference
      mountPath: {{ .Values.canary.mountPath | quote }}
      readOnly: true
    {{- end }}
{{- end -}}

{{- define "vllm-rocm.volumes" -}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ include "vllm-rocm.shmSize" . }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
# What automountServiceAccountToken would mount, but for the sidecar only: vLLM never gets API credentials.
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
# Scratch space of the read-only vLLM container (/tmp: torch.compile, Ray, ZMQ sockets; HOME: see vllm-rocm.vllmHome),
# bounded by the node's ephemeral storage (resources.limits.ephemeral-storage bounds it per pod).
- name: vllm-tmp
  emptyDir: {}
- name: vllm-home
  emptyDir: {}
{{- if .Values.modelCache.enabled }}
- name: model-cache
  persistentVolumeClaim:
    claimName: {{ default (printf "%s-models" (include "vllm-rocm.fullname" .)) .Values.modelCache.existingClaim }}
{{- else }}
# No model cache volume: HF_HOME is still writable, for the life of the pod.
- name: model-cache
  emptyDir: {}
{{- end }}
{{- with .Values.hfToken.existingSecret }}
- name: hf-token
  secret:
    secretName: {{ . | quote }}
    defaultMode: 0440
    items:
      - key: {{ $.Values.hfToken.key | quote }}
        path: token
{{- end }}
{{- if .Values.compileCache.enabled }}
- name: compile-cache
  persistentVolumeClaim:
    claimName: {{ default (printf "%s-compile-cache" (include "vllm-rocm.fullname" .)) .Values.compileCache.existingClaim }}
{{- end }}
{{- with (include "vllm-rocm.accuracyReference" . | fromJson).configMap }}
- name: canary-reference
  configMap:
    name: {{ . }}
{{- end }}
{{- end -}}

{{- define "vllm-rocm.affinity" -}}
{{- $aff := deepCopy .Values.affinity -}}
{{- if .Values.amdNodeAffinity.enabled -}}
{{- $expr := dict "key" .Values.amdNodeAffinity.labelKey "operator" "Exists" -}}
{{- if .Values.amdNodeAffinity.productNames -}}
{{- $expr = dict "key" .Values.amdNodeAffinity.labelKey "operator" "In" "values" .Values.amdNodeAffinity.productNames -}}
{{- end -}}
{{- $na := default dict $aff.nodeAffinity -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list (dict "matchExpressions" (list $expr)))) -}}
{{- $_ := set $aff "nodeAffinity" $na -}}
{{- end -}}
{{- if $aff -}}
affinity:
  {{- toYaml $aff | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* Pod-level fields shared by the Deployment and the LeaderWorkerSet. */}}
{{- define "vllm-rocm.podCommon" -}}
serviceAccountName: {{ include "vllm-rocm.serviceAccountName" . }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- include "vllm-rocm.nodeSelector" . | nindent 0 }}
{{- include "vllm-rocm.affinity" . | nindent 0 }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "vllm-rocm.volumes" . | nindent 2 }}
{{- end -}}

{{- define "vllm-rocm.vllmProbes" -}}
startupProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
livenessProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
  timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
{{- end -}}


{{/* Why the effective mode may not run, or "": the known issues (files/known-issues.json, templates/_known_issues.tpl;
AITER FA on 0.10.x among them) and the rule on speculative decoding with AITER FA. In: dict root (the chart context),
e (its effective settings). Used by vllm-rocm.validate and, for each mode, by vllm-rocm.qualificationCandidates. */}}
{{- define "vllm-rocm.modeRefusal" -}}
{{- $e := .e -}}
{{- $rel := $e.releaseMinor -}}
{{- $mode := $e.mode -}}
{{- $modeText := $mode -}}
{{- if ne $mode $e.requestedMode -}}
{{- $modeText = printf "%s (which vLLM %s runs as %s: %s)" $e.requestedMode $e.releasePatch $mode (join "; " $e.modeChanges) -}}
{{- end -}}
{{- $graphs := ne $mode "NONE" -}}
{{- $unpatched010 := and (not $e.patched) (semverCompare "<0.11.0-0" $rel) -}}
{{- with include "vllm-rocm.knownIssuesRefusal" (include "vllm-rocm.knownIssues" (dict "root" .root "e" $e) | fromJson) -}}
{{- printf "%s\n(judged on compilation.cudagraphMode=%s)" . $modeText -}}
{{- else -}}
{{- if and $graphs $e.aiterFA $e.speculative (hasPrefix "FULL" $mode) (or (eq $mode "FULL") $unpatched010) (semverCompare "<0.20.0-0" $rel) -}}
{{- printf "compilation.cudagraphMode=%s with speculative decoding on the AITER FlashAttention backend (vLLM %s): decode graphs have query length 1+k, which this backend cannot run as full graphs (unpatched 0.10.2 freezes flash-attention in and returns wrong tokens; vllm#25104, vllm#31625). Use compilation.cudagraphMode=PIECEWISE, or another attentionBackend." $modeText $e.release -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The vLLM container's cudagraph mode from the qualification ConfigMap (key `mode`, written by
`vllm-rocm qualification publish` from the report's recommendation), when it is decided at run time: the kubelet
expands it into --compilation-config. A missing ConfigMap or key keeps the container from starting. */}}
{{- define "vllm-rocm.vllmModeEnv" -}}
{{- $src := include "vllm-rocm.qualificationSource" . | fromJson -}}
{{- if $src.runtimeMode }}
- name: {{ include "vllm-rocm.runtimeModeVar" . }}
  valueFrom:
    configMapKeyRef:
      name: {{ $src.configMap }}
      key: mode
{{- end }}
{{- end -}}

{{/* Where the pods may run: qualification.gpuProduct (or the report's gpu_product) pins them to nodes of that
product, so the report's proof and the GPU that serves are the same product. */}}
{{- define "vllm-rocm.nodeSelector" -}}
{{- $sel := deepCopy (default dict .Values.nodeSelector) -}}
{{- with (include "vllm-rocm.qualificationSource" . | fromJson).gpuProduct -}}
{{- $_ := set $sel $.Values.amdNodeAffinity.labelKey . -}}
{{- end -}}
{{- if $sel -}}
nodeSelector:
  {{- toYaml $sel | nindent 2 }}
{{- end -}}
{{- end -}}
