{{/*
The operator's permissions, shared by the ClusterRole and the per-namespace Roles:
- trainingjobs: read and watch them; delete a finished one after ttlSecondsAfterFinished
  (it never changes a job's spec or metadata: no update, no patch);
- trainingjobs/status: conditions, replica counts, progress (the status subresource);
- trainingjobs/finalizers: update, so owner references with blockOwnerDeletion pass the
  OwnerReferencesPermissionEnforcement admission plugin where a cluster enables it;
- pods, services, secrets: what a job owns (one Pod per replica, the headless Service, the
  rendezvous-key Secret): watched, created and deleted, never updated;
- pods/log: get, to read the evaluator's final evaluation after its process has exited;
- events: the decisions users must see (create, and patch to count repeats).
*/}}
{{- define "tj-operator.managerRules" -}}
- apiGroups: ["tjo.dev"]
  resources: ["trainingjobs"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: ["tjo.dev"]
  resources: ["trainingjobs/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["tjo.dev"]
  resources: ["trainingjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "services", "secrets"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
