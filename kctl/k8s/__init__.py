"""Kubernetes objects for a profile on a fleet (``kctl render --k8s``). Rendered only:
kctl drives no cluster.

:mod:`.target` resolves a profile and a fleet file (:mod:`kctl.fleet.loader`) and refuses what
Kubernetes cannot express; :mod:`.pod` is the SGLang container and pod template,
:mod:`.workload` the Deployment / LeaderWorkerSet and Service, :mod:`.policy` the serving
pods' PodDisruptionBudget and NetworkPolicy, :mod:`.router` the SGLang Model Gateway in
front of them (Deployment, Service, RBAC), :mod:`.argo` the optional Argo Rollouts canary;
:mod:`.names` checks the API server's value rules the schemas do not carry;
:mod:`.render` puts them together and writes them. docs/kubernetes.md maps
every field.
"""
