{{/*
The operator's permissions, shared by the ClusterRole and the per-namespace Roles:
- trainingjobs: read and watch them; delete a finished one after ttlSecondsAfterFinished
  (it never changes a job's spec or metadata: no update, no patch);
- trainingjobs/status: update (PUT) of conditions, replica counts, progress; it reads a job
  through the main resource and never patches status;
- trainingjobs/finalizers: update, so owner references with blockOwnerDeletion pass the
  OwnerReferencesPermissionEnforcement admission plugin where a cluster enables it;
- pods, services: what a job owns (one Pod per replica, the headless Service): listed,
  watched and created, never updated; pods are never read one by one (no get); only pods are
  deleted (gang restarts, cleanPodPolicy, and with gracePeriodSeconds 0 one stuck terminating
  on a lost node), the Service goes with the job (garbage collector);
- secrets: created (the job's rendezvous key) and deleted (one of the job's name whose key the
  operator did not record is replaced), never read: no get, list or watch, so the operator
  cannot read any Secret of the cluster; it tracks the key by its hash in the job's status;
- networkpolicies (with networkPolicy.enabled): one per job, created and made again when it
  goes (list, watch: the informer that sees it go), read when one of its name already exists
  and the cache does not show it (get); never updated, never deleted (the garbage collector
  removes it with its job);
- pods/log: get, to read the evaluator's final evaluation after its process has exited;
- events: the decisions users must see (create, and patch to count repeats);
- podgroups (docs/gangs.md): one per gang of a job scheduled all or nothing, of Kubernetes
  (scheduling.k8s.io, where the cluster serves it), Volcano (scheduling.volcano.sh) or the
  coscheduling plugin (scheduling.x-k8s.io): created, watched (list, watch: the informer the
  operator reads them from where the cluster serves the kind), read when one of its name
  exists that the informer does not show yet (get), deleted (the groups of a job's earlier
  gangs, at a gang restart);
- nodes (cluster-wide only, in the ClusterRole; a Role cannot grant a cluster-scoped
  resource): listed and watched, never read one by one, never written: the nodes the jobs'
  pods run on, so a pod on a lost node (NotReady, or an untolerated NoExecute taint) restarts
  its gang at once and a pod stuck terminating there is force-deleted (docs/reliability.md,
  "Lost nodes"); and whether every node declares the feature in-place restarts need
  (restartInPlace: auto). With watchNamespaces the operator runs without it and says so once
  in its log;
- with kueue.enabled (docs/kueue.md): Kueue's workloads, one per queued job, watched (list,
  watch: the informer a queued job's pass reads from; get where they are not watched) and
  created, annotated with the job's last backup (patch), marked Finished and their admission
  released after an eviction through workloads/status (update); resourceflavors watched, for
  the node labels and tolerations of an admission; workloadpriorityclasses watched, for a
  job's priority.
*/}}
{{- define "tj-operator.managerRules" -}}
- apiGroups: ["tjo.dev"]
  resources: ["trainingjobs"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: ["tjo.dev"]
  resources: ["trainingjobs/status"]
  verbs: ["update"]
- apiGroups: ["tjo.dev"]
  resources: ["trainingjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["scheduling.k8s.io", "scheduling.volcano.sh", "scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch", "create", "delete"]
{{- if not .Values.watchNamespaces }}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}
{{- if .Values.networkPolicy.enabled }}
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create"]
{{- end }}
{{- if .Values.kueue.enabled }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["update"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["resourceflavors", "workloadpriorityclasses"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}
