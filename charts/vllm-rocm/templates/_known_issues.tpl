{{/*
Known issues: files/known-issues.json is a byte copy of known-issues/known-issues.json (the single source; a test
keeps the two identical), judged against the effective settings (templates/_effective.tpl) with the semantics of
patches/src/vllm_rocm_patches/known_issues.py. tests/charts/test_known_issues_chart.py renders every row's trigger
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

{{/* A PEP 440 version -> JSON {ok, key, base, pre, post, local}. `key` orders as pep440.Version does (epoch, release
padded to 10 numbers, pre-release class and number, post, dev); `base` is epoch + release. */}}
{{- define "vllm-rocm.pep440Parse" -}}
{{- $re := `^v?(?:([0-9]+)!)?([0-9]+(?:\.[0-9]+)*)(?:[-_.]?(a|alpha|b|beta|rc|c|pre|preview)[-_.]?([0-9]+)?)?(?:-([0-9]+)|[-_.]?(post|rev|r)[-_.]?([0-9]+)?)?(?:[-_.]?(dev)[-_.]?([0-9]+)?)?(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?$` -}}
{{- $v := lower (trim (toString .)) -}}
{{- $rel := list -}}
{{- $g := list -}}
{{- if regexMatch $re $v -}}
{{- range $i := until 11 -}}{{- $g = append $g (regexReplaceAll $re $v (printf "${%d}" $i)) -}}{{- end -}}
{{- range $p := splitList "." (index $g 2) -}}{{- $rel = append $rel (atoi $p) -}}{{- end -}}
{{- end -}}
{{- if or (not $rel) (gt (len $rel) 10) -}}
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
{{- $base := prepend $rel (atoi (default "0" (index $g 1))) -}}
{{- $key := concat $base (list $preCls $preN (ternary 0 1 (lt $post 0)) (max $post 0) (ternary 1 0 (lt $dev 0)) (max $dev 0)) -}}
{{- toJson (dict "ok" true "key" $key "base" $base "pre" (or (ne (index $g 3) "") (ge $dev 0)) "post" (ge $post 0) "local" (ne (index $g 10) "")) -}}
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

{{/* "true" when the parsed version .version satisfies the specifier set .spec ("" = any), else "false". Implements
==, !=, <, <=, >, >= as pep440.Specifier does (pre-releases count; `<V` excludes V's pre-releases unless V is one,
`>V` excludes V's post-releases unless V is one); anything else fails the render naming .what. */}}
{{- define "vllm-rocm.pep440Contains" -}}
{{- $v := .version -}}
{{- $what := .what -}}
{{- $ok := true -}}
{{- $specRe := `^(==|!=|<=|>=|<|>)\s*((?:[0-9]+!)?[^\s,;*+=<>!~]+)$` -}}
{{- range $part := splitList "," (toString .spec) -}}
{{- $part = trim $part -}}
{{- if $part -}}
{{- if not (regexMatch $specRe $part) -}}
{{- fail (printf "files/known-issues.json: %s: the chart's guard cannot evaluate the specifier %q (templates/_known_issues.tpl implements ==, !=, <, <=, >, >= without .* or local labels); update the chart" $what $part) -}}
{{- end -}}
{{- $op := regexReplaceAll $specRe $part "${1}" -}}
{{- $s := include "vllm-rocm.pep440Parse" (regexReplaceAll $specRe $part "${2}") | fromJson -}}
{{- if not $s.ok -}}
{{- fail (printf "files/known-issues.json: %s: %q is not a PEP 440 version" $what $part) -}}
{{- end -}}
{{- $c := int (include "vllm-rocm.pep440Cmp" (dict "a" $v.key "b" $s.key)) -}}
{{- $sameBase := eq (toJson $v.base) (toJson $s.base) -}}
{{- $r := false -}}
{{- if eq $op "==" -}}{{- $r = eq $c 0 -}}
{{- else if eq $op "!=" -}}{{- $r = ne $c 0 -}}
{{- else if eq $op "<=" -}}{{- $r = le $c 0 -}}
{{- else if eq $op ">=" -}}{{- $r = ge $c 0 -}}
{{- else if eq $op "<" -}}{{- $r = and (lt $c 0) (or $s.pre (not (and $v.pre $sameBase))) -}}
{{- else -}}{{- $r = and (gt $c 0) (not (and (not $s.post) $v.post $sameBase)) -}}
{{- end -}}
{{- if not $r -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $ok -}}
{{- end -}}

{{/* The known-issues data, checked enough that a malformed copy fails the render instead of judging nothing. */}}
{{- define "vllm-rocm.knownIssuesData" -}}
{{- $text := .Files.Get "files/known-issues.json" -}}
{{- if not $text -}}
{{- fail "files/known-issues.json is missing from the chart (copy known-issues/known-issues.json there)" -}}
{{- end -}}
{{- $data := fromJson $text -}}
{{- if or (hasKey $data "Error") (ne (toString (index $data "schema_version")) "1") (not (kindIs "slice" (index $data "issues"))) (not (kindIs "map" (index $data "switch_defaults"))) -}}
{{- fail (printf "files/known-issues.json is not a known-issues file of schema_version 1 (%s)" (toString (default "" (index $data "Error")))) -}}
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
Every row judged: JSON {"fixes": [ids the image fixes], "fixesFrom", "matches": [{id, title, symptom, verified,
status (applies | possible | no), unknown, failed, here, mitigatedBy, blocking, allowed, advice, link, patch}]}.
Argument: dict "root" (the chart context) "e" (the effective settings).
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
{{- $public := first (splitList "+" $release) -}}
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
{{- $defaults := $data.switch_defaults -}}
{{- $matches := list -}}
{{- range $issue := $data.issues -}}
{{- $a := $issue.affects -}}
{{- $unknown := list -}}
{{- $failed := list -}}
{{- $here := list -}}
{{- /* vllm: always present and always known. */ -}}
{{- $here = append $here (printf "vLLM %s" $release) -}}
{{- if ne (include "vllm-rocm.pep440Contains" (dict "version" $version "spec" $a.vllm "what" (printf "%s affects.vllm" $issue.id))) "true" -}}
{{- $failed = append $failed "vllm" -}}
{{- end -}}
{{- with $a.rocm -}}
{{- if not $rocm.ok -}}
{{- $unknown = append $unknown "rocm" -}}
{{- else -}}
{{- $here = append $here (printf "ROCm %s" $e.rocmVersion) -}}
{{- if ne (include "vllm-rocm.pep440Contains" (dict "version" $rocm "spec" . "what" (printf "%s affects.rocm" $issue.id))) "true" -}}
{{- $failed = append $failed "rocm" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Lists: membership of the upper- / lower-cased value ("none" = not set). */ -}}
{{- $lists := list
  (list "archs" $e.gpuArch "lower" "GPU arch %s")
  (list "attention_backends" $e.backend "upper" (printf "attention backend %%s (%s)" $e.backendFrom))
  (list "kv_cache_dtypes" (default "auto" $e.kvCacheDtype) "lower" "kv-cache %s")
  (list "quantizations" $e.quantization "lower" "quantization %s")
  (list "speculative_methods" $e.speculativeMethod "lower" "speculative method %s") -}}
{{- range $l := $lists -}}
{{- $want := index $a (index $l 0) -}}
{{- if not (kindIs "invalid" $want) -}}
{{- $value := toString (index $l 1) -}}
{{- if not $value -}}
{{- $unknown = append $unknown (index $l 0) -}}
{{- else -}}
{{- $norm := list -}}
{{- range $w := $want -}}{{- $norm = append $norm (ternary (upper (trim (toString $w))) (trim (toString $w)) (eq (index $l 2) "upper")) -}}{{- end -}}
{{- $value = ternary (upper (trim $value)) (lower (trim $value)) (eq (index $l 2) "upper") -}}
{{- $here = append $here (printf (index $l 3) $value) -}}
{{- if not (has $value $norm) -}}{{- $failed = append $failed (index $l 0) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* switches: the variable's value as vLLM reads it, else the data's default. */ -}}
{{- with $a.switches -}}
{{- $bad := false -}}
{{- $undecided := false -}}
{{- range $name, $want := . -}}
{{- if has $name $e.vllmEnvUnknown -}}
{{- $undecided = true -}}
{{- else -}}
{{- $on := index $defaults $name -}}
{{- if hasKey $e.vllmEnv $name -}}{{- $on = has (lower (trim (index $e.vllmEnv $name))) (list "true" "1") -}}{{- end -}}
{{- $here = append $here (printf "%s=%s" $name (ternary "1" "0" (eq (toString $on) "true"))) -}}
{{- if ne (toString $on) (toString $want) -}}{{- $bad = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $bad -}}{{- $failed = append $failed "switches" -}}{{- else if $undecided -}}{{- $unknown = append $unknown "switches" -}}{{- end -}}
{{- end -}}
{{- /* Integer ranges: inclusive min / max and not_multiple_of. */ -}}
{{- range $r := list (list "tensor_parallel_size" $e.tensorParallelSize "TP %d") (list "max_num_seqs" $e.maxNumSeqs "max-num-seqs %d") -}}
{{- $want := index $a (index $r 0) -}}
{{- if not (kindIs "invalid" $want) -}}
{{- $n := int (index $r 1) -}}
{{- if le $n 0 -}}
{{- $unknown = append $unknown (index $r 0) -}}
{{- else -}}
{{- $here = append $here (printf (index $r 2) $n) -}}
{{- $in := true -}}
{{- if hasKey $want "min" -}}{{- if lt $n (int $want.min) -}}{{- $in = false -}}{{- end -}}{{- end -}}
{{- if hasKey $want "max" -}}{{- if gt $n (int $want.max) -}}{{- $in = false -}}{{- end -}}{{- end -}}
{{- if hasKey $want "not_multiple_of" -}}{{- if eq (mod $n (int $want.not_multiple_of)) 0 -}}{{- $in = false -}}{{- end -}}{{- end -}}
{{- if not $in -}}{{- $failed = append $failed (index $r 0) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* modes: always present. */ -}}
{{- $modeHit := false -}}
{{- range $m := $modes -}}{{- if has $m $a.modes -}}{{- $modeHit = true -}}{{- end -}}{{- end -}}
{{- $here = append $here (printf "cudagraph_mode %s" (join "/" $modes)) -}}
{{- if not $modeHit -}}{{- $failed = append $failed "modes" -}}{{- end -}}
{{- $status := ternary "no" (ternary "possible" "applies" (gt (len $unknown) 0)) (gt (len $failed) 0) -}}
{{- $patch := index (default dict $issue.mitigation.patches) $public -}}
{{- $mitigatedBy := "" -}}
{{- if and $patch (has $patch $carried) -}}{{- $mitigatedBy = printf "vllm-%s/%s" $public $patch -}}{{- end -}}
{{- $refusable := and $issue.verified (eq $status "applies") (not $mitigatedBy) (has $issue.symptom (list "wrong_tokens" "crash")) -}}
{{- $matches = append $matches (dict
  "id" $issue.id "title" $issue.title "symptom" $issue.symptom "verified" $issue.verified "status" $status
  "unknown" $unknown "failed" $failed "here" $here "mitigatedBy" $mitigatedBy "patch" (ternary (printf "vllm-%s/%s" $public $patch) "" (ne (toString (default "" $patch)) ""))
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
{{- $names := dict "rocm" "rocm.version" "archs" "rocm.gpuArch" "attention_backends" "attentionBackend" "quantizations" "quantization" "speculative_methods" "speculativeConfig.method" "max_num_seqs" "maxNumSeqs" "switches" "extraEnv (a VLLM_ROCM_* switch from a Secret or ConfigMap)" -}}
{{- $out := list -}}
{{- range $m := $ki.matches -}}
{{- $tag := printf "%s%s" $m.symptom (ternary "" ", unverified" $m.verified) -}}
{{- if $m.allowed -}}
{{- $out = append $out (printf "  ALLOWED by allowKnownIssues (refused otherwise): %s [%s]: %s\n      what to do: %s" $m.id $tag $m.title $m.advice) -}}
{{- else if and $m.mitigatedBy (ne $m.status "no") -}}
{{- $out = append $out (printf "  mitigated by the image's %s: %s [%s]" $m.mitigatedBy $m.id $tag) -}}
{{- else if eq $m.status "applies" -}}
{{- $out = append $out (printf "  applies (not refused: %s): %s [%s]: %s" (ternary "unverified" (printf "a %s issue" $m.symptom) (not $m.verified)) $m.id $tag $m.title) -}}
{{- else if eq $m.status "possible" -}}
{{- $set := list -}}
{{- range $c := $m.unknown -}}{{- $set = append $set (index $names $c) -}}{{- end -}}
{{- $out = append $out (printf "  possible (set %s to decide): %s [%s]: %s" (join ", " $set) $m.id $tag $m.title) -}}
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
