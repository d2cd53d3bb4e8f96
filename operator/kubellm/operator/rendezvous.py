"""Environment variable names of the multi-node rendezvous (operator writes, runtime reads).

A multi-node replica is a group of ``pipeline`` pods; each runs ``tensor`` GPUs. Rank 0
(the group leader, stage 0 of the pipeline) serves HTTP; the others join it through
torch.distributed at ``MASTER_ADDR:MASTER_PORT``.
"""

MASTER_ADDR = "KUBELLM_MASTER_ADDR"  # DNS name of the group's rank-0 pod
MASTER_PORT = "KUBELLM_MASTER_PORT"  # its rendezvous TCP port
NNODES = "KUBELLM_NNODES"  # pods in the group (= pipeline size)
NODE_RANK = "KUBELLM_NODE_RANK"  # this pod's index in the group, 0 = leader
NPROC_PER_NODE = "KUBELLM_NPROC_PER_NODE"  # GPUs per pod (= tensor size)

DEFAULT_MASTER_PORT = 29500

# Pod labels the downward API turns into NODE_RANK.
STATEFULSET_INDEX_LABEL = "apps.kubernetes.io/pod-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
