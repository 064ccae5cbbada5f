{{/* The chart's name. */}}
{{- define "kerf.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of the release's objects: the release name, with the chart's when it lacks it. */}}
{{- define "kerf.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "kerf.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kerf.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the controller's pods. */}}
{{- define "kerf.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kerf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "kerf.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kerf.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller's image: repository, then the digest or the tag (the appVersion by default). */}}
{{- define "kerf.controller.image" -}}
{{- if .Values.controller.image.digest }}
{{- printf "%s@%s" .Values.controller.image.repository .Values.controller.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.controller.image.repository (default .Chart.AppVersion .Values.controller.image.tag) }}
{{- end }}
{{- end }}

{{/* The Lease the replicas elect a leader on: Karpenter's, so that Kerf and a Karpenter left
running in the same namespace wait on each other rather than act at once. */}}
{{- define "kerf.leaseName" -}}
karpenter-leader-election
{{- end }}

{{/* The controller container's name: `controller` when the value is empty. */}}
{{- define "kerf.controller.containerName" -}}
{{- default "controller" .Values.controller.containerName }}
{{- end }}

{{/* The pod's affinity: every pod (anti-)affinity term, required or preferred, that has no
labelSelector key selects the chart's pods. */}}
{{- define "kerf.affinity" -}}
{{- $affinity := deepCopy .Values.affinity }}
{{- $selector := dict "matchLabels" (include "kerf.selectorLabels" . | fromYaml) }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- $rules := get $affinity $kind }}
{{- if kindIs "map" $rules }}
{{- range $term := $rules.requiredDuringSchedulingIgnoredDuringExecution | default list }}
{{- if not (hasKey $term "labelSelector") }}
{{- $_ := set $term "labelSelector" (deepCopy $selector) }}
{{- end }}
{{- end }}
{{- range $weighted := $rules.preferredDuringSchedulingIgnoredDuringExecution | default list }}
{{- if and (kindIs "map" $weighted.podAffinityTerm) (not (hasKey $weighted.podAffinityTerm "labelSelector")) }}
{{- $_ := set $weighted.podAffinityTerm "labelSelector" (deepCopy $selector) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{/* FEATURE_GATES: every gate of Karpenter v1.15, in its order (the controller refuses true for
the gates it does not implement). */}}
{{- define "kerf.featureGates" -}}
{{- $g := .Values.settings.featureGates }}
{{- $gates := list }}
{{- range $pair := list (list "ReservedCapacity" $g.reservedCapacity) (list "SpotToSpotConsolidation" $g.spotToSpotConsolidation) (list "NodeRepair" $g.nodeRepair) (list "NodeOverlay" $g.nodeOverlay) (list "StaticCapacity" $g.staticCapacity) (list "CapacityBuffer" $g.capacityBuffer) (list "TerminateFirstDrift" $g.terminateFirstDrift) (list "TerminateFirstRepair" $g.terminateFirstRepair) (list "PodDeletionCostManagement" $g.podDeletionCostManagement) }}
{{- $gates = append $gates (printf "%s=%t" (index $pair 0) (index $pair 1 | default false)) }}
{{- end }}
{{- join "," $gates }}
{{- end }}

{{/* AWS_FEATURE_GATES: every AWS gate of Karpenter v1.15 (a null DRA gate is false). */}}
{{- define "kerf.awsFeatureGates" -}}
{{- $g := .Values.settings.awsFeatureGates }}
{{- $gates := list }}
{{- range $pair := list (list "NodeClassCEL" $g.nodeClassCEL) (list "DRANVIDIAGPU" $g.draNVIDIAGPU) (list "DRAEFA" $g.draEFA) (list "RebootForRepair" $g.rebootForRepair) }}
{{- $gates = append $gates (printf "%s=%t" (index $pair 0) (index $pair 1 | default false)) }}
{{- end }}
{{- join "," $gates }}
{{- end }}
