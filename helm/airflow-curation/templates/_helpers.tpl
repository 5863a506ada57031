{{- define "curation.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "curation.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "curation.labels" -}}
app.kubernetes.io/name: {{ include "curation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "curation.jobsNamespace" -}}
{{- default .Release.Namespace .Values.jobs.namespace -}}
{{- end -}}

{{- define "curation.airflowNamespace" -}}
{{- default .Release.Namespace .Values.airflow.namespace -}}
{{- end -}}

{{- define "curation.jobServiceAccount" -}}
{{- .Values.jobs.serviceAccount.name -}}
{{- end -}}

{{- define "curation.lakeSecret" -}}
{{- if .Values.lake.existingSecret -}}
{{- .Values.lake.existingSecret -}}
{{- else -}}
{{- printf "%s-lake" (include "curation.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "curation.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/* Non-root, no privilege escalation, no capabilities: the same as the backend's job pods. */}}
{{- define "curation.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.jobs.runAsUser }}
runAsGroup: {{ .Values.jobs.runAsUser }}
fsGroup: {{ .Values.jobs.runAsUser }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "curation.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.jobs.runAsUser }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The KubernetesBackend options the DAGs use (backend_options of the curation connection). */}}
{{- define "curation.backendOptions" -}}
{{- $pod := dict "image" (include "curation.image" .) "image_pull_policy" .Values.image.pullPolicy
      "service_account" (include "curation.jobServiceAccount" .) "storage_secret" (include "curation.lakeSecret" .)
      "requests" .Values.jobs.resources.requests "limits" .Values.jobs.resources.limits
      "node_selector" .Values.jobs.nodeSelector "tolerations" .Values.jobs.tolerations
      "gpu_resource" .Values.jobs.gpu.resource "gpus" (int .Values.jobs.gpu.count)
      "gpu_node_selector" .Values.jobs.gpu.nodeSelector "gpu_tolerations" .Values.jobs.gpu.tolerations
      "run_as_user" (int .Values.jobs.runAsUser) "priority_class" .Values.jobs.priorityClassName
      "image_pull_secrets" (list) -}}
{{- range .Values.imagePullSecrets }}{{- $_ := set $pod "image_pull_secrets" (append $pod.image_pull_secrets .name) }}{{- end }}
{{- $opts := dict "namespace" (include "curation.jobsNamespace" .) "in_cluster" true "pod" $pod
      "launch_kinds" .Values.jobs.launchKinds "parallelism" (int .Values.jobs.parallelism)
      "max_shard_groups" (int .Values.jobs.maxShardGroups) "dask_workers" (int .Values.jobs.daskWorkers)
      "ray_workers" (int .Values.jobs.rayWorkers) "ray_version" .Values.ray.rayVersion
      "ttl_seconds" (int .Values.jobs.ttlSecondsAfterFinished) -}}
{{- toJson $opts -}}
{{- end -}}
