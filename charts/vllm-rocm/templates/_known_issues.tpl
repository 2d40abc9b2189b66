{{/*
Known issues: files/known-issues.json is a byte copy of known-issues/known-issues.json (the single source; a test
keeps the two identical), judged against the effective settings (templates/_effective.tpl) with the semantics of
known-issues/src/vllm_rocm_known_issues/evaluator.py. tests/charts/test_known_issues_chart.py renders every row's trigger
and checks that the chart refuses exactly what that evaluator's `blocking` says, row by row.

- Each condition a row sets must hold; an absent or null one holds for anything. A fact the chart does not know
  ("" in the effective settings) leaves the row `possible`: listed in NOTES, never refused.
- `vllm` / `rocm`: PEP 440 specifier sets (vllm-rocm.pep440*; local labels such as +rocm700 ignored).
- `modes`: the row holds when the mode vLLM's config holds (configMode) or the graph behaviour the guard judges
  (mode) is listed: the chart judges the requested settings and may refuse more than the sidecar, which judges
  what runs, never less.
- Mitigated: the row names a patch for this release (`mitigation.patches`) and the image carries that patch: with
  vllm.patched=true (this project's image) the patches of the rows vllm.fixesIssues lists (the image's
  io.vllm-rocm.fixes-issues label), or, when that is empty, the release's whole series. An image the chart is told
  nothing about (vllm.patched=false) carries none.
- Refused: verified, applies, not mitigated, symptom wrong_tokens or crash, id not in allowKnownIssues.
*/}}

{{/* A PEP 440 version -> JSON {ok, key, final, base}: `key` orders the public version as pep440.Bound compares it
(release padded to 10 numbers, pre-release class and number, post, dev); `final` is the key of the release a
pre-release or dev build leads to (0.10.2rc1 -> 0.10.2, 0.10.2.post1.dev3 -> 0.10.2.post1), else `key`. Bounded as
pep440.py bounds it: at most 100 characters, 10 release numbers, 9 digits per number (sprig's atoi would turn a longer
number into 0, and float64 compares 9 digits exactly); anything else is {"ok": false}. */}}
{{- define "vllm-rocm.pep440Parse" -}}
{{- $re := `^v?(?:([0-9]+)!)?([0-9]+(?:\.[0-9]+)*)(?:[-_.]?(a|alpha|b|beta|rc|c|pre|preview)[-_.]?([0-9]+)?)?(?:-([0-9]+)|[-_.]?(post|rev|r)[-_.]?([0-9]+)?)?(?:[-_.]?(dev)[-_.]?([0-9]+)?)?(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?$` -}}
{{- $raw := toString . -}}
{{- $v := lower (trim $raw) -}}
{{- $rel := list -}}
{{- $g := list -}}
{{- $ok := and (le (len $raw) 100) (regexMatch $re $v) (not (regexMatch "[0-9]{10}" (first (splitList "+" $v)))) -}}
{{- if $ok -}}
{{- /* every group in one match ("|" cannot occur in a matching version) */ -}}
{{- $g = prepend (splitList "|" (regexReplaceAll $re $v "${1}|${2}|${3}|${4}|${5}|${6}|${7}|${8}|${9}|${10}")) $v -}}
{{- range $p := splitList "." (index $g 2) -}}{{- $rel = append $rel (atoi $p) -}}{{- end -}}
{{- end -}}
{{- if or (not $ok) (not $rel) (gt (len $rel) 10) -}}
{"ok": false}
{{- else -}}
{{- range $i := until (int (sub 10 (len $rel))) -}}{{- $rel = append $rel 0 -}}{{- end -}}
{{- $post := -1 -}}
{{- if index $g 5 -}}{{- $post = atoi (index $g 5) -}}{{- else if index $g 6 -}}{{- $post = atoi (default "0" (index $g 7)) -}}{{- end -}}
{{- $dev := -1 -}}
{{- if index $g 8 -}}{{- $dev = atoi (default "0" (index $g 9)) -}}{{- end -}}
{{- /* X.devN < XaN < XbN < XrcN < X < X.postN */ -}}
{{- $preCls := 4 -}}
{{- $preN := 0 -}}
{{- if index $g 3 -}}
{{- $preCls = index (dict "a" 1 "alpha" 1 "b" 2 "beta" 2 "rc" 3 "c" 3 "pre" 3 "preview" 3) (index $g 3) -}}
{{- $preN = atoi (default "0" (index $g 4)) -}}
{{- else if and (lt $post 0) (ge $dev 0) -}}
{{- $preCls = 0 -}}
{{- end -}}
{{- /* The epoch is left out: a packager's epoch (1!0.10.2) reorders versions, it does not change which release's
code the build holds (pep440.Bound.admits); bounds take none (the spec pattern refuses `!`). */ -}}
{{- $base := prepend $rel 0 -}}
{{- $key := concat $base (list $preCls $preN (ternary 0 1 (lt $post 0)) (max $post 0) (ternary 1 0 (lt $dev 0)) (max $dev 0)) -}}
{{- $final := $key -}}
{{- if index $g 3 -}}
{{- $final = concat $base (list 4 0 0 0 1 0) -}}
{{- else if ge $dev 0 -}}
{{- $final = concat $base (list 4 0 (ternary 0 1 (lt $post 0)) (max $post 0) 1 0) -}}
{{- end -}}
{{- toJson (dict "ok" true "key" $key "final" $final "base" $base) -}}
{{- end -}}
{{- end -}}

{{/* -1, 0 or 1: how key .a compares with key .b (lists of numbers of equal length). */}}
{{- define "vllm-rocm.pep440Cmp" -}}
{{- $c := 0 -}}
{{- range $i, $x := .a -}}
{{- if eq $c 0 -}}
{{- $y := index $.b $i -}}
{{- if lt (float64 $x) (float64 $y) -}}{{- $c = -1 -}}{{- else if gt (float64 $x) (float64 $y) -}}{{- $c = 1 -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $c -}}
{{- end -}}

{{/* The bounds of a specifier set .spec ("" = none) as JSON [{op, key}]: pep440.SpecifierSet's `>=X` / `<Y`; any
other operator, or a version that is not PEP 440, fails the render naming .what. */}}
{{- define "vllm-rocm.pep440Bounds" -}}
{{- $what := .what -}}
{{- $bounds := list -}}
{{- $specRe := `^(>=|<)\s*([0-9][^\s,;*+=<>!~]*)$` -}}
{{- range $part := splitList "," (toString .spec) -}}
{{- $part = trim $part -}}
{{- if $part -}}
{{- if not (regexMatch $specRe $part) -}}
{{- fail (printf "files/known-issues.json: %s: the chart's guard cannot evaluate the bound %q (templates/_known_issues.tpl implements >=FIRST_AFFECTED and <FIRST_FIXED without local labels); update the chart" $what $part) -}}
{{- end -}}
{{- $s := include "vllm-rocm.pep440Parse" (regexReplaceAll $specRe $part "${2}") | fromJson -}}
{{- if not $s.ok -}}
{{- fail (printf "files/known-issues.json: %s: %q is not a PEP 440 version" $what $part) -}}
{{- end -}}
{{- $bounds = append $bounds (dict "op" (regexReplaceAll $specRe $part "${1}") "key" $s.key) -}}
{{- end -}}
{{- end -}}
{{- toJson $bounds -}}
{{- end -}}

{{/* "true" when the parsed version .version is on the affected side of every bound of .bounds (pep440Bounds), else
"false": `>=X` holds when the build's final release is X or later, `<Y` while the build itself sorts before Y (a
pre-release or dev build of Y is not assumed to hold Y's fix). */}}
{{- define "vllm-rocm.pep440Admits" -}}
{{- $v := .version -}}
{{- $ok := true -}}
{{- range $b := .bounds -}}
{{- if $ok -}}
{{- if eq $b.op ">=" -}}
{{- $ok = ge (int (include "vllm-rocm.pep440Cmp" (dict "a" $v.final "b" $b.key))) 0 -}}
{{- else -}}
{{- $ok = lt (int (include "vllm-rocm.pep440Cmp" (dict "a" $v.key "b" $b.key))) 0 -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $ok -}}
{{- end -}}

{{/* pep440Admits of the parsed .version and the specifier set .spec (the row's text), naming .what on errors. */}}
{{- define "vllm-rocm.pep440Contains" -}}
{{- include "vllm-rocm.pep440Admits" (dict "version" .version "bounds" (include "vllm-rocm.pep440Bounds" . | fromJsonArray)) -}}
{{- end -}}

{{/* Every attention backend name vLLM 0.10-0.34 has (known_issues.BACKEND_NAMES; a test keeps them equal). */}}
{{- define "vllm-rocm.attentionBackendNames" -}}
AMX_MLA B12X CPU_ATTN CPU_MLA CUSTOM CUTLASS_MLA CUTLASS_MSA DIFFERENTIAL_FLASH_ATTN DUAL_CHUNK_FLASH_ATTN FLASHINFER FLASHINFER_MLA FLASHINFER_MLA_SPARSE FLASHINFER_MLA_SPARSE_DSV4 FLASHINFER_MLA_SPARSE_DSV41 FLASHINFER_MLA_SPARSE_SM120 FLASHINFER_MLA_SPARSE_SM90 FLASHINFER_TS FLASHMLA FLASHMLA_MEGA_ATTN_DSV41 FLASHMLA_SPARSE FLASHMLA_SPARSE_DSV4 FLASHMLA_SPARSE_DSV41 FLASH_ATTN_DIFFKV FLASH_ATTN_MLA FLASH_ATTN_MLA_SPARSE FLASH_ATTN_MLA_SPARSE_FA4 FLEX_ATTENTION HPC_ATTN IPEX KIMI_K3_KV_BALANCED_MLA MINIMAX_M3_SPARSE NO_ATTENTION PALLAS ROCM_AITER_FA ROCM_AITER_MLA ROCM_AITER_MLA_SPARSE ROCM_AITER_TRITON_MLA ROCM_AITER_UNIFIED_ATTN ROCM_ATTN ROCM_FLASH ROCM_FLASHMLA_SPARSE_DSV4 ROCM_FLASHMLA_SPARSE_DSV41 ROCM_OCTAVE ROCM_SEGMENTED_ATTN STEP5_DSA TOKENSPEED_MLA TORCH_SDPA TREE_ATTN TRITON_ATTN TRITON_ATTN_DIFFKV TRITON_FLASHINFER TRITON_FLASH_ATTN TRITON_MLA TRITON_MSA TURBOQUANT ULTRAQUANT XFORMERS XPU_MLA_SPARSE
{{- end -}}

{{/* An enum-style backend name as known_issues.canonical_attention_backend writes it (TRITON_ATTN_VLLM_V1 ->
TRITON_ATTN; FLASH_ATTN / FLASH_ATTN_VLLM_V1, AITER FA's own name, -> ROCM_AITER_FA), or "" when vLLM has no such
backend. */}}
{{- define "vllm-rocm.canonicalBackend" -}}
{{- $n := upper (trim (toString .)) -}}
{{- $n = trimSuffix "_VLLM_V1" $n -}}
{{- if eq $n "FLASH_ATTN" -}}{{- $n = "ROCM_AITER_FA" -}}{{- end -}}
{{- if has $n (splitList " " (include "vllm-rocm.attentionBackendNames" nil)) -}}{{- $n -}}{{- end -}}
{{- end -}}

{{/*
vLLM's attention backend for a model with standard attention: known_issues.infer_attention_backend, rule for rule
(its docstring has the release facts). Argument: dict "version" (parsed release), "arch" (gfx name, "" = unknown:
taken for a gfx9 Instinct GPU), "env" (the container's VLLM_* variables; unset = vLLM's default), "explicit"
(--attention-backend). JSON {"name": canonical name or "" when it cannot be known, "from": why}.
*/}}
{{- define "vllm-rocm.attentionBackend" -}}
{{- $v := .version -}}
{{- $env := default dict .env -}}
{{- $arch := toString .arch -}}
{{- $lt := dict -}}
{{- /* pep440Parse keys of the releases whose selection rules differ (a test checks them). */ -}}
{{- range $t, $k := dict "0.11.0" (list 0 0 11) "0.11.1" (list 0 0 11 1) "0.12.0" (list 0 0 12) "0.15.0" (list 0 0 15) "0.18.0" (list 0 0 18) "0.19.0" (list 0 0 19) -}}
{{- $key := concat $k (list 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0) -}}
{{- $key = concat (slice $key 0 11) (list 4 0 0 0 1 0) -}}
{{- $_ := set $lt $t (lt (int (include "vllm-rocm.pep440Cmp" (dict "a" $v.final "b" $key))) 0) -}}
{{- end -}}
{{- $on := dict -}}
{{- range $name := list "VLLM_ROCM_USE_AITER" "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION" "VLLM_V1_USE_PREFILL_DECODE_ATTENTION" "VLLM_USE_AITER_UNIFIED_ATTENTION" -}}
{{- $_ := set $on $name (has (lower (trim (toString (default "" (index $env $name))))) (list "true" "1")) -}}
{{- end -}}
{{- $_ := set $on "VLLM_ROCM_USE_AITER_MHA" (has (lower (trim (toString (default "True" (index $env "VLLM_ROCM_USE_AITER_MHA"))))) (list "true" "1")) -}}
{{- $aiter := $on.VLLM_ROCM_USE_AITER -}}
{{- $mha := $on.VLLM_ROCM_USE_AITER_MHA -}}
{{- $unified := $on.VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION -}}
{{- $prefillDecode := and (index $lt "0.15.0") $on.VLLM_V1_USE_PREFILL_DECODE_ATTENTION -}}
{{- $gfx9 := or (not $arch) (has $arch (list "gfx90a" "gfx942" "gfx950")) -}}
{{- $mi3xx := or (not $arch) (has $arch (list "gfx942" "gfx950")) -}}
{{- $chosen := "" -}}
{{- if .explicit -}}
{{- $chosen = include "vllm-rocm.canonicalBackend" .explicit -}}
{{- if not $chosen -}}
{{- fail (printf "attentionBackend=%s is not an attention backend vLLM 0.10-0.34 names (e.g. TRITON_ATTN, ROCM_ATTN, ROCM_AITER_FA, ROCM_AITER_UNIFIED_ATTN)" (toString .explicit)) -}}
{{- end -}}
{{- else if and (index $env "VLLM_ATTENTION_BACKEND") (index $lt "0.15.0") -}}
{{- $chosen = include "vllm-rocm.canonicalBackend" (index $env "VLLM_ATTENTION_BACKEND") -}}
{{- end -}}
{{- $name := "" -}}
{{- $from := "" -}}
{{- if and $chosen (not (index $lt "0.12.0")) -}}
{{- if not (index $lt "0.18.0") -}}
{{- $name = $chosen -}}
{{- else if and (has $chosen (list "FLEX_ATTENTION" "TRITON_ATTN" "ROCM_ATTN" "ROCM_AITER_UNIFIED_ATTN" "ROCM_AITER_FA")) (or (ne $chosen "ROCM_AITER_FA") $gfx9) -}}
{{- $name = $chosen -}}
{{- end -}}
{{- $from = ternary "attentionBackend" (printf "unknown: vLLM refuses %s on this release and GPU" $chosen) (ne $name "") -}}
{{- else if index $lt "0.11.0" -}}
{{- if ne (trim (toString (default "1" (index $env "VLLM_USE_V1")))) "0" -}}{{- $name = ternary "ROCM_AITER_FA" "TRITON_ATTN" (and $aiter $mha $gfx9) -}}{{- end -}}
{{- else if index $lt "0.11.1" -}}
{{- if and $aiter $mha $gfx9 -}}{{- $name = "ROCM_AITER_FA" -}}
{{- else if or (and $aiter $on.VLLM_USE_AITER_UNIFIED_ATTENTION) $prefillDecode (eq $chosen "ROCM_ATTN") -}}{{- $name = "ROCM_ATTN" -}}
{{- else -}}{{- $name = "TRITON_ATTN" -}}{{- end -}}
{{- else if index $lt "0.12.0" -}}
{{- if eq $chosen "FLEX_ATTENTION" -}}{{- $name = $chosen -}}
{{- else if or (and $aiter $mha $gfx9) (eq $chosen "ROCM_AITER_FA") -}}{{- $name = "ROCM_AITER_FA" -}}
{{- else if or (and $aiter $unified $gfx9) (eq $chosen "ROCM_AITER_UNIFIED_ATTN") -}}{{- $name = "ROCM_AITER_UNIFIED_ATTN" -}}
{{- else if or $prefillDecode (eq $chosen "ROCM_ATTN") -}}{{- $name = "ROCM_ATTN" -}}
{{- else -}}{{- $name = "TRITON_ATTN" -}}{{- end -}}
{{- else if index $lt "0.18.0" -}}
{{- if and $aiter $unified -}}{{- $name = "ROCM_AITER_UNIFIED_ATTN" -}}
{{- else if and $aiter $mha $gfx9 -}}{{- $name = "ROCM_AITER_FA" -}}
{{- else if $prefillDecode -}}{{- $name = "ROCM_ATTN" -}}
{{- else -}}{{- $name = "TRITON_ATTN" -}}{{- end -}}
{{- else if index $lt "0.19.0" -}}
{{- if and $aiter $unified -}}{{- $name = "ROCM_AITER_UNIFIED_ATTN" -}}
{{- else if and $aiter $mha $mi3xx -}}{{- $name = "ROCM_AITER_FA" -}}
{{- else -}}{{- $name = "TRITON_ATTN" -}}{{- end -}}
{{- end -}}
{{- if not $from -}}
{{- if $name -}}
{{- $from = printf "vLLM's automatic choice for a model with standard attention (VLLM_ROCM_USE_AITER=%s, VLLM_ROCM_USE_AITER_MHA=%s, GPU %s)" (ternary "1" "0" $aiter) (ternary "1" "0" $mha) (default "unknown, taken for gfx9" $arch) -}}
{{- else -}}
{{- $from = "unknown: from 0.19 vLLM picks the first backend of its priority list that accepts the model and kv-cache; set attentionBackend" -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "name" $name "from" $from) -}}
{{- end -}}

{{/* The known-issues data, checked enough that a malformed copy fails the render instead of judging nothing. */}}
{{- define "vllm-rocm.knownIssuesData" -}}
{{- $text := .Files.Get "files/known-issues.json" -}}
{{- if not $text -}}
{{- fail "files/known-issues.json is missing from the chart (copy known-issues/known-issues.json there)" -}}
{{- end -}}
{{- $data := fromJson $text -}}
{{- if or (hasKey $data "Error") (ne (toString (index $data "schema_version")) "2") (not (kindIs "slice" (index $data "issues"))) (not (kindIs "map" (index $data "switch_defaults"))) -}}
{{- fail (printf "files/known-issues.json is not a known-issues file of schema_version 2 (%s)" (toString (default "" (index $data "Error")))) -}}
{{- end -}}
{{- toJson $data -}}
{{- end -}}

{{/* Advice for one row, as known_issues.Issue.advice() words it. */}}
{{- define "vllm-rocm.knownIssueAdvice" -}}
{{- $m := default dict .mitigation -}}
{{- $parts := list -}}
{{- with $m.safe_modes -}}{{- $parts = append $parts (printf "cudagraph_mode %s" (join " or " .)) -}}{{- end -}}
{{- with $m.env -}}
{{- $kv := list -}}
{{- range $k, $val := . -}}{{- $kv = append $kv (printf "%s=%s" $k (toString $val)) -}}{{- end -}}
{{- $parts = append $parts (join ", " $kv) -}}
{{- end -}}
{{- with $m.patches -}}
{{- $rels := list -}}
{{- range $r := keys . | sortAlpha -}}{{- $rels = append $rels (printf "vLLM %s" $r) -}}{{- end -}}
{{- $parts = append $parts (printf "the series' patch (%s)" (join ", " $rels)) -}}
{{- end -}}
{{- with .fix -}}{{- with .first_release -}}{{- $parts = append $parts (printf "vLLM >= %s" .) -}}{{- end -}}{{- end -}}
{{- $text := toString (default "" $m.advice) -}}
{{- $out := $text -}}
{{- if $parts -}}{{- $out = printf "%s%sOptions: %s." $text (ternary " " "" (ne $text "")) (join "; " $parts) -}}{{- end -}}
{{- trim $out -}}
{{- end -}}

{{/* The row's mitigation in this chart's values (" In values: ..." or ""). */}}
{{- define "vllm-rocm.knownIssueValues" -}}
{{- $m := default dict .mitigation -}}
{{- $parts := list -}}
{{- with $m.safe_modes -}}
{{- $modes := list -}}
{{- range $mode := . -}}{{- $modes = append $modes (ternary "enforceEager=true" (printf "compilation.cudagraphMode=%s" $mode) (eq $mode "NONE")) -}}{{- end -}}
{{- $parts = append $parts (join " or " $modes) -}}
{{- end -}}
{{- $owned := dict "VLLM_ROCM_USE_AITER" "aiter.enabled" "VLLM_ROCM_USE_AITER_MHA" "aiter.mha" -}}
{{- range $k, $val := default dict $m.env -}}
{{- if hasKey $owned $k -}}
{{- $parts = append $parts (printf "%s=%s" (index $owned $k) (ternary "true" "false" (has (lower (toString $val)) (list "1" "true")))) -}}
{{- else -}}
{{- $parts = append $parts (printf "extraEnv %s=%s" $k (toString $val)) -}}
{{- end -}}
{{- end -}}
{{- if $parts -}}{{- printf " In values: %s." (join "; " $parts) -}}{{- end -}}
{{- end -}}

{{/*
One condition of a row judged: "true", "false" or "unknown" (known_issues.KnownIssues._condition). Argument: dict
"cond" (the condition's name), "want" (the row's value), "e" (the effective settings), "version" / "rocm" (parsed),
"defaults" (switch_defaults), "what" (for error messages).
*/}}
{{- define "vllm-rocm.knownIssueCondition" -}}
{{- $e := .e -}}
{{- $want := .want -}}
{{- $r := "true" -}}
{{- if kindIs "invalid" $want -}}
{{- else if eq .cond "vllm" -}}
{{- $r = include "vllm-rocm.pep440Contains" (dict "version" .version "spec" $want "what" (printf "%s vllm" .what)) -}}
{{- else if eq .cond "rocm" -}}
{{- if not .rocm.ok -}}{{- $r = "unknown" -}}
{{- else -}}{{- $r = include "vllm-rocm.pep440Contains" (dict "version" .rocm "spec" $want "what" (printf "%s rocm" .what)) -}}{{- end -}}
{{- else if eq .cond "switches" -}}
{{- $bad := false -}}
{{- $undecided := false -}}
{{- range $name, $w := $want -}}
{{- if has $name $e.vllmEnvUnknown -}}
{{- $undecided = true -}}
{{- else -}}
{{- $d := index $.defaults $name -}}
{{- if kindIs "bool" $w -}}
{{- $on := $d -}}
{{- if hasKey $e.vllmEnv $name -}}{{- $on = has (lower (trim (index $e.vllmEnv $name))) (list "true" "1") -}}{{- end -}}
{{- if ne (toString $on) (toString $w) -}}{{- $bad = true -}}{{- end -}}
{{- else -}}
{{- $got := lower (toString $d) -}}
{{- if hasKey $e.vllmEnv $name -}}{{- $got = lower (trim (index $e.vllmEnv $name)) -}}{{- end -}}
{{- if ne $got (lower (toString $w)) -}}{{- $bad = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $r = ternary "false" (ternary "unknown" "true" $undecided) $bad -}}
{{- else if has .cond (list "tensor_parallel_size" "max_num_seqs") -}}
{{- $n := int (index (dict "tensor_parallel_size" $e.tensorParallelSize "max_num_seqs" $e.maxNumSeqs) .cond) -}}
{{- if le $n 0 -}}{{- $r = "unknown" -}}
{{- else -}}
{{- if hasKey $want "min" -}}{{- if lt $n (int $want.min) -}}{{- $r = "false" -}}{{- end -}}{{- end -}}
{{- if hasKey $want "max" -}}{{- if gt $n (int $want.max) -}}{{- $r = "false" -}}{{- end -}}{{- end -}}
{{- if hasKey $want "not_multiple_of" -}}{{- if eq (mod $n (int $want.not_multiple_of)) 0 -}}{{- $r = "false" -}}{{- end -}}{{- end -}}
{{- end -}}
{{- else if eq .cond "modes" -}}
{{- $hit := false -}}
{{- range $m := uniq (list $e.configMode $e.mode) -}}{{- if has $m $want -}}{{- $hit = true -}}{{- end -}}{{- end -}}
{{- $r = ternary "true" "false" $hit -}}
{{- else -}}
{{- /* lists: membership of the upper- (backends, modes) / lower-cased value; "" = unknown to the chart (the model's
architecture always is: the sidecar reads it from vLLM's log). */ -}}
{{- $value := toString (index (dict "archs" $e.gpuArch "attention_backends" $e.backend "architectures" ""
  "kv_cache_dtypes" (default "auto" $e.kvCacheDtype) "quantizations" $e.quantization
  "speculative_methods" $e.speculativeMethod) .cond) -}}
{{- if not $value -}}{{- $r = "unknown" -}}
{{- else -}}
{{- $upper := eq .cond "attention_backends" -}}
{{- $norm := list -}}
{{- range $w := $want -}}{{- $norm = append $norm (ternary (upper (trim (toString $w))) (lower (trim (toString $w))) $upper) -}}{{- end -}}
{{- $value = ternary (upper (trim $value)) (lower (trim $value)) $upper -}}
{{- $r = ternary "true" "false" (has $value $norm) -}}
{{- end -}}
{{- end -}}
{{- $r -}}
{{- end -}}

{{/*
Every row judged: JSON {"fixes": [ids the image fixes], "fixesFrom", "matches": [{id, title, symptom, verified,
status (applies | possible | no), unknown, failed, scope ("" | inside | outside | undecided), here, mitigatedBy,
blocking, allowed, advice, link, patch}]}. Argument: dict "root" (the chart context) "e" (the effective settings).
*/}}
{{- define "vllm-rocm.knownIssues" -}}
{{- $root := .root -}}
{{- $e := .e -}}
{{- $v := $root.Values -}}
{{- $data := include "vllm-rocm.knownIssuesData" $root | fromJson -}}
{{- $ids := list -}}
{{- range $issue := $data.issues -}}{{- $ids = append $ids $issue.id -}}{{- end -}}
{{- range $key, $list := dict "allowKnownIssues" $v.allowKnownIssues "vllm.fixesIssues" $v.vllm.fixesIssues -}}
{{- range $i, $id := $list -}}
{{- if not (has $id $ids) -}}
{{- fail (printf "%s[%d]=%s: no known issue has this id (files/known-issues.json, listed in known-issues/README.md: %s)" $key $i (toString $id) (join ", " $ids)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $release := toString $v.vllm.release -}}
{{- $public := first (splitList "+" (trim $release)) -}}
{{- $version := include "vllm-rocm.pep440Parse" $release | fromJson -}}
{{- if not $version.ok -}}
{{- fail (printf "vllm.release=%s is not a PEP 440 version (e.g. 0.10.2, 0.10.1.1, 0.15.0rc1, 0.10.2+rocm700): the known-issues guard cannot judge it" $release) -}}
{{- end -}}
{{- $rocm := dict "ok" false -}}
{{- if $e.rocmVersion -}}
{{- $rocm = include "vllm-rocm.pep440Parse" $e.rocmVersion | fromJson -}}
{{- if not $rocm.ok -}}
{{- fail (printf "rocm.version=%s is not a version the known-issues guard can compare (e.g. 7.0.0, 6.4.1)" $e.rocmVersion) -}}
{{- end -}}
{{- end -}}
{{- /* The patches of vllm-<release>/ the image carries: those of the rows its label lists, or, for
vllm.patched=true, those the data names for the release (tests check they are the release's whole series). */ -}}
{{- $carried := list -}}
{{- $fixesFrom := "" -}}
{{- if $v.vllm.fixesIssues -}}
{{- if not $v.vllm.patched -}}
{{- fail (printf "vllm.fixesIssues=%s but vllm.patched=false: only this project's images carry patches and the io.vllm-rocm.fixes-issues label; set vllm.patched=true for such an image, or empty vllm.fixesIssues" (join "," $v.vllm.fixesIssues)) -}}
{{- end -}}
{{- $fixesFrom = "vllm.fixesIssues" -}}
{{- end -}}
{{- if $v.vllm.patched -}}
{{- range $issue := $data.issues -}}
{{- $p := index (default dict $issue.mitigation.patches) $public -}}
{{- if and $p (or (not $v.vllm.fixesIssues) (has $issue.id $v.vllm.fixesIssues)) -}}{{- $carried = append $carried $p -}}{{- end -}}
{{- end -}}
{{- $fixesFrom = default (printf "vllm.patched=true: this project's image for vLLM %s and its patch series" $public) $fixesFrom -}}
{{- else -}}
{{- $fixesFrom = "vllm.patched=false" -}}
{{- end -}}
{{- $fixes := list -}}
{{- range $issue := $data.issues -}}
{{- if has (index (default dict $issue.mitigation.patches) $public) $carried -}}{{- $fixes = append $fixes $issue.id -}}{{- end -}}
{{- end -}}
{{- $allow := default list $v.allowKnownIssues -}}
{{- $modes := uniq (list $e.configMode $e.mode) -}}
{{- $conditions := list "vllm" "rocm" "archs" "attention_backends" "switches" "architectures" "kv_cache_dtypes" "quantizations" "speculative_methods" "tensor_parallel_size" "max_num_seqs" "modes" -}}
{{- /* What the refusal says about this configuration, per condition a row sets. */ -}}
{{- $facts := dict "vllm" (printf "vLLM %s" $release) "rocm" (printf "ROCm %s" (default "unknown" $e.rocmVersion))
  "archs" (printf "GPU arch %s" (default "unknown" $e.gpuArch))
  "attention_backends" (printf "attention backend %s (%s)" (default "unknown" $e.backend) $e.backendFrom)
  "architectures" "the model's architecture unknown to the chart" "kv_cache_dtypes" (printf "kv-cache %s" (default "auto" $e.kvCacheDtype))
  "quantizations" (printf "quantization %s" (default "unknown" $e.quantization)) "speculative_methods" (printf "speculative method %s" (default "unknown" $e.speculativeMethod))
  "tensor_parallel_size" (printf "TP %d" (int $e.tensorParallelSize)) "max_num_seqs" (printf "max-num-seqs %d" (int $e.maxNumSeqs))
  "modes" (printf "cudagraph_mode %s" (join "/" $modes)) -}}
{{- $matches := list -}}
{{- range $issue := $data.issues -}}
{{- $ctx := dict "e" $e "version" $version "rocm" $rocm "defaults" $data.switch_defaults "what" $issue.id -}}
{{- $here := list -}}
{{- range $c := $conditions -}}
{{- if not (kindIs "invalid" (index $issue.affects $c)) -}}
{{- if eq $c "switches" -}}
{{- range $name, $_ := index $issue.affects $c -}}
{{- $here = append $here (printf "%s=%s" $name (ternary "(from a Secret or ConfigMap)" (toString (default (index $data.switch_defaults $name) (index $e.vllmEnv $name))) (has $name $e.vllmEnvUnknown))) -}}
{{- end -}}
{{- else -}}
{{- $here = append $here (index $facts $c) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $unknown := list -}}
{{- $failed := list -}}
{{- range $c, $want := $issue.affects -}}
{{- if not (kindIs "invalid" $want) -}}
{{- $r := include "vllm-rocm.knownIssueCondition" (merge (dict "cond" $c "want" $want) $ctx) -}}
{{- if eq $r "unknown" -}}{{- $unknown = append $unknown $c -}}{{- else if eq $r "false" -}}{{- $failed = append $failed $c -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- /* evidence_scope: inside one alternative, undecided (no alternative contradicted by a known value), or outside. */ -}}
{{- $scope := "" -}}
{{- with $issue.evidence_scope -}}
{{- $scope = "outside" -}}
{{- range $alt := . -}}
{{- if ne $scope "inside" -}}
{{- $rs := list -}}
{{- range $c, $w := $alt -}}{{- $rs = append $rs (include "vllm-rocm.knownIssueCondition" (merge (dict "cond" $c "want" $w) $ctx)) -}}{{- end -}}
{{- if not (or (has "false" $rs) (has "unknown" $rs)) -}}{{- $scope = "inside" -}}
{{- else if not (has "false" $rs) -}}{{- $scope = "undecided" -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $status := "applies" -}}
{{- if $failed -}}{{- $status = "no" -}}{{- else if or $unknown (has $scope (list "outside" "undecided")) -}}{{- $status = "possible" -}}{{- end -}}
{{- $patch := index (default dict $issue.mitigation.patches) $public -}}
{{- $mitigatedBy := "" -}}
{{- if and $patch (has $patch $carried) -}}{{- $mitigatedBy = printf "vllm-%s/%s" $public $patch -}}{{- end -}}
{{- $refusable := and $issue.verified (eq $status "applies") (not $mitigatedBy) (has $issue.symptom (list "wrong_tokens" "crash")) -}}
{{- $matches = append $matches (dict
  "id" $issue.id "title" $issue.title "symptom" $issue.symptom "verified" $issue.verified "status" $status
  "unknown" $unknown "failed" $failed "scope" $scope "here" $here "mitigatedBy" $mitigatedBy
  "patch" (ternary (printf "vllm-%s/%s" $public $patch) "" (ne (toString (default "" $patch)) ""))
  "blocking" (and $refusable (not (has $issue.id $allow))) "allowed" (and $refusable (has $issue.id $allow))
  "advice" (include "vllm-rocm.knownIssueAdvice" $issue) "values" (include "vllm-rocm.knownIssueValues" $issue)
  "link" (first $issue.links)) -}}
{{- end -}}
{{- toJson (dict "fixes" $fixes "fixesFrom" $fixesFrom "matches" $matches) -}}
{{- end -}}

{{/* The render failure for refused rows, or "". Argument: the output of vllm-rocm.knownIssues (parsed). */}}
{{- define "vllm-rocm.knownIssuesRefusal" -}}
{{- $ids := list -}}
{{- $lines := list -}}
{{- range $m := .matches -}}
{{- if $m.blocking -}}
{{- $ids = append $ids $m.id -}}
{{- $lines = append $lines (printf "  - %s [%s]: %s\n      here: %s\n      what to do: %s%s%s\n      see %s" $m.id $m.symptom $m.title (join ", " $m.here) $m.advice $m.values (ternary (printf " This project's image carries the patch %s: vllm.patched=true (or the id in vllm.fixesIssues, as the image's io.vllm-rocm.fixes-issues label lists it)." $m.patch) "" (ne $m.patch "")) $m.link) -}}
{{- end -}}
{{- end -}}
{{- if $ids -}}
{{- printf "the chart refuses this configuration: it hits known issues of vLLM on ROCm that give wrong tokens or crash (files/known-issues.json; the table is in known-issues/README.md):\n%s\nTo deploy it anyway, knowingly: allowKnownIssues: [%s]" (join "\n" $lines) (join ", " $ids) -}}
{{- end -}}
{{- end -}}

{{/* NOTES: what the known-issues data says about this configuration. Argument: the root context. */}}
{{- define "vllm-rocm.knownIssuesNotes" -}}
{{- $e := include "vllm-rocm.effective" . | fromJson -}}
{{- $ki := include "vllm-rocm.knownIssues" (dict "root" . "e" $e) | fromJson -}}
{{- $names := dict "rocm" "rocm.version" "archs" "rocm.gpuArch" "attention_backends" "attentionBackend" "quantizations" "quantization" "speculative_methods" "speculativeConfig.method" "max_num_seqs" "maxNumSeqs" "switches" "extraEnv (a VLLM_* switch from a Secret or ConfigMap)" "architectures" "the model's architecture (no chart value: the sidecar reads it from vLLM's log)" -}}
{{- $out := list -}}
{{- range $m := $ki.matches -}}
{{- $tag := printf "%s%s" $m.symptom (ternary "" ", unverified" $m.verified) -}}
{{- if $m.allowed -}}
{{- $out = append $out (printf "  ALLOWED by allowKnownIssues (refused otherwise): %s [%s]: %s\n      what to do: %s" $m.id $tag $m.title $m.advice) -}}
{{- else if and $m.mitigatedBy (ne $m.status "no") -}}
{{- $out = append $out (printf "  mitigated by the image's %s: %s [%s]" $m.mitigatedBy $m.id $tag) -}}
{{- else if eq $m.status "applies" -}}
{{- $out = append $out (printf "  applies (not refused: %s): %s [%s]: %s" (ternary "unverified" (printf "a %s issue" $m.symptom) (not $m.verified)) $m.id $tag $m.title) -}}
{{- else if and (eq $m.status "possible") $m.unknown -}}
{{- $set := list -}}
{{- range $c := $m.unknown -}}{{- $set = append $set (index $names $c) -}}{{- end -}}
{{- $out = append $out (printf "  possible (set %s to decide): %s [%s]: %s" (join ", " $set) $m.id $tag $m.title) -}}
{{- else if eq $m.status "possible" -}}
{{- $out = append $out (printf "  possible (%s; not refused): %s [%s]: %s" (ternary "outside the GPUs and models the reports cover" "the reports cover some models or GPUs only, and the chart does not know the model's architecture: the sidecar judges the running model" (eq $m.scope "outside")) $m.id $tag $m.title) -}}
{{- end -}}
{{- end -}}
Known issues (files/known-issues.json) for this configuration; the image fixes {{ ternary (join ", " $ki.fixes) "none" (gt (len $ki.fixes) 0) }} ({{ $ki.fixesFrom }}):
{{- if $out }}
{{ join "\n" $out }}
{{- else }}
  none applies.
{{- end }}
  At run time the sidecar judges the same data against what vLLM logs: vllm_known_issue_active / vllm_known_issue_possible.
{{- end -}}
