{{/* Names and labels shared by every object of the release. */}}

{{- define "klutch-gitops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "klutch-gitops.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "klutch-gitops.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "klutch-gitops.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: <fullname>-<component>, within 63 characters. */}}
{{- define "klutch-gitops.componentName" -}}
{{- printf "%s-%s" (include "klutch-gitops.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component -}}
{{- end -}}

{{- define "klutch-gitops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "klutch-gitops.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "klutch-gitops.labels" -}}
{{ include "klutch-gitops.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: klutch-gitops
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "klutch-gitops.serviceAccountName" -}}
{{- $values := index .root.Values .key -}}
{{- if not .root.Values.rbac.create -}}
{{- required (printf "%s.serviceAccount.name is required when rbac.create is false: the RBAC you grant instead binds that name" .key) $values.serviceAccount.name -}}
{{- else if $values.serviceAccount.create -}}
{{- default (include "klutch-gitops.componentName" .) $values.serviceAccount.name -}}
{{- else -}}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .key .key) $values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* <registry>/<repository>:<tag> or @<digest>; global.imageRegistry replaces image.registry. */}}
{{- define "klutch-gitops.image" -}}
{{- $image := .Values.image -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default $image.registry -}}
{{- $name := ternary (printf "%s/%s" $registry $image.repository) $image.repository (ne $registry "") -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $name $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* A component's container arguments: its command and config, the log level, extraArgs. */}}
{{- define "klutch-gitops.args" -}}
{{- $args := list .command "--config" (printf "/etc/klutch-gitops/config/%s" .config) "--log-level" .values.logLevel -}}
{{- toJson (concat $args .values.extraArgs) -}}
{{- end -}}

{{/* topologySpreadConstraints, each without a labelSelector given this component's Pod labels. */}}
{{- define "klutch-gitops.topologySpreadConstraints" -}}
{{- $constraints := list -}}
{{- range (index .root.Values .key).topologySpreadConstraints -}}
{{- $constraint := deepCopy . -}}
{{- if not $constraint.labelSelector -}}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "klutch-gitops.selectorLabels" $ | fromYaml)) -}}
{{- end -}}
{{- $constraints = append $constraints $constraint -}}
{{- end -}}
{{- with $constraints -}}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* Whether the chart creates its Roles, ClusterRoles and their bindings (rbac.create). */}}
{{- define "klutch-gitops.rbac" -}}
{{- if .Values.rbac.create }}true{{ end -}}
{{- end -}}

{{/* Where the services read their files. */}}
{{- define "klutch-gitops.kubeconfigPath" -}}/etc/klutch-gitops/kubeconfig/kubeconfig{{- end -}}

{{/* Whether the reconciler replicas elect a leader through a Lease (reconciler.config.leaderElection). */}}
{{- define "klutch-gitops.leaderElection" -}}
{{- $election := .Values.reconciler.config.leaderElection | default dict -}}
{{- if $election.enabled }}true{{ end -}}
{{- end -}}

{{/* Whether the replicas also share the repositories through shard Leases (leaderElection.shards). */}}
{{- define "klutch-gitops.shards" -}}
{{- $election := .Values.reconciler.config.leaderElection | default dict -}}
{{- if and $election.enabled $election.shards }}true{{ end -}}
{{- end -}}

{{/* The reconciler's Lease: leaderElection.name, or one per release. */}}
{{- define "klutch-gitops.leaseName" -}}
{{- $election := .Values.reconciler.config.leaderElection | default dict -}}
{{- $election.name | default (include "klutch-gitops.componentName" (dict "root" . "component" "reconciler")) -}}
{{- end -}}

{{/* What each component publishes through an Ingress or HTTPRoute (path prefixes), and the
Service port it goes to: the bind API's routes (bind_api/routers/api.py and browser.py) but not
ops.py's /healthz and /metrics; the reconciler's push webhooks (reconciler/triggers/webhooks.py)
but not /metrics, /readyz or /registrations. */}}
{{- define "klutch-gitops.publicPaths" -}}
{{- if eq .component "bind-api" -}}
[/api/v1, /export, /authorize, /callback, /resources, /bind]
{{- else -}}
[/webhooks]
{{- end -}}
{{- end -}}
