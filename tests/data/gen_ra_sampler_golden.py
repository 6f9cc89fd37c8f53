# Prints the expected indices of sampler_test's "repeated augmentation equals torchvision's
# RASampler" case. RASampler lives in torchvision's reference scripts
# (references/classification/sampler.py), which Debian's python3-torchvision does not ship;
# ra_sampler_indices below is its __iter__, line for line, on torch's own randperm.
#   /usr/bin/python3 tests/data/gen_ra_sampler_golden.py   (needs python3-torch)
import math

import torch


def ra_sampler_indices(n, num_replicas, rank, repetitions, seed, epoch, shuffle=True):
    num_samples = int(math.ceil(n * float(repetitions) / float(num_replicas)))
    total_size = num_samples * num_replicas
    num_selected_samples = int(math.floor(n // 256 * 256 / num_replicas))
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    indices = torch.randperm(n, generator=g).tolist() if shuffle else list(range(n))
    indices = [ele for ele in indices for i in range(repetitions)]
    indices += indices[: (total_size - len(indices))]
    assert len(indices) == total_size
    indices = indices[rank:total_size:num_replicas]
    assert len(indices) == num_samples
    return indices[:num_selected_samples]


for n, world, reps, seed, epoch, shuffle in [(600, 3, 3, 5, 2, True), (300, 2, 4, 0, 0, True), (513, 5, 2, 9, 1, False)]:
    for rank in range(world):
        ix = ra_sampler_indices(n, world, rank, reps, seed, epoch, shuffle)
        weighted = sum((k + 1) * v for k, v in enumerate(ix))
        print(f"    {{{n}, {world}, {reps}, {seed}, {epoch}, {str(shuffle).lower()}, {rank}, {len(ix)}, {weighted}, "
              f"{{{', '.join(map(str, ix[:12]))}}}}},")
