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
{{- if $values.serviceAccount.create -}}
{{- default (include "klutch-gitops.componentName" .) $values.serviceAccount.name -}}
{{- else -}}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .key .key) $values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "klutch-gitops.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security profile. */}}
{{- define "klutch-gitops.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "klutch-gitops.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
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
