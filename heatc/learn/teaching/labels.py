"""Labels by adversarial perturbation of input embeddings: per-token sensitivity, pair coupling.

The drift objective D(δ) of an encoder teacher (1 − cos between the perturbed and the
original sentence embedding) is at its minimum at δ = 0, so its gradient there vanishes
(measured: ~1e-6) and a first-order "gradient direction" is undefined. Its second-order
expansion is exact in closed form, though: with u the sentence embedding, J_i the Jacobian of
u with respect to token i's input embedding and P the projection orthogonal to u,

    D(δ_i) ≈ ½ δ_iᵀ H_ii δ_i,    H_ij = J_iᵀ P J_j / ‖u‖²  (the Hessian of D at 0).

**Token sensitivity** is the drift of the worst perturbation of size ε‖e_i‖ at position i:
½ (ε‖e_i‖)² λ_max(H_ii). λ_max is estimated with Jacobian probes: K random output
directions z_k (projected orthogonal to u) give g_ik = J_iᵀ P z_k for *every* position in one
backward pass each; the top eigenvalue of the K×K Gram matrix of the g_ik / ‖u‖ estimates
λ_max(H_ii). The batch costs one forward and K backward passes. A causal teacher's objective
(log-likelihood of the continuation) has a non-vanishing gradient, so its sensitivity is the
first-order ε‖e_i‖‖∇_i‖ from one backward pass. `explicit_sensitivity` is the slow,
direct path — projected gradient ascent from a random start on the sphere of radius
ε‖e_i‖, one sequence copy per position — that tests check the fast path against.

**Pair coupling** of positions p and j is the mixed second derivative ‖H_jp v‖ for random
unit directions v at p: how much moving token p changes the drift's sensitivity to token j.
For an encoder H v = Jᵀ (P J v) / ‖u‖²: J v for one probe position per sentence comes from a
central difference of two gradient-free forward passes, and the VJP shares the backward pass
of the token probes (`labels_and_coupling`). A causal teacher's Hessian has no such form; H v
is a central difference of the objective's gradient, (∇D(E + hV) − ∇D(E − hV)) / 2h. Neither
needs double backward; `exact_coupling` computes H v that way (eager attention) for tests.

Randomness is drawn per sentence from (seed, sentence text), so a sentence gets the same
labels in any batch, on any rank of a distributed run.

Public surface: `labels_and_coupling`, `token_sensitivity`, `pair_coupling`,
`explicit_sensitivity`, `exact_coupling`, `DEFAULT_EPSILON`.
"""

from __future__ import annotations

import hashlib

import torch

from heatc.learn.teaching.teacher import Batch, Teacher

DEFAULT_EPSILON = 0.05  # perturbation radius, relative to the token's input-embedding norm
DEFAULT_PROBES = 4
_FD_STEP = 1e-2  # central-difference step, relative to the embedding norm


def _generator(seed: int, text: str, salt: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}\0{salt}\0{text}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def _per_sentence_normal(batch: Batch, seed: int, salt: str, shape: tuple[int, ...]) -> torch.Tensor:
    """[B, *shape] standard normals, each sentence's drawn from its own generator."""
    return torch.stack([torch.randn(shape, generator=_generator(seed, t, salt)) for t in batch.texts])


def _orthogonal(z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return z - (z * u).sum(-1, keepdim=True) / (u * u).sum(-1, keepdim=True) * u


def token_sensitivity(
    teacher: Teacher, batch: Batch, *, epsilon: float = DEFAULT_EPSILON, probes: int = DEFAULT_PROBES, seed: int = 0
) -> torch.Tensor:
    """[B, T] drift under the worst perturbation of size ε‖e_i‖ at each position (0 at
    special tokens and padding)."""
    embeds = teacher.embed(batch.input_ids)
    norms2 = (embeds * embeds).sum(-1)
    mask = teacher.special_mask(batch).to(embeds.dtype)
    x = embeds.clone().requires_grad_(True)
    if teacher.kind == "causal":
        reference = teacher.reference(embeds, batch)
        (grad,) = torch.autograd.grad(teacher.objective(x, batch, reference).sum(), x)
        return epsilon * norms2.sqrt() * grad.norm(dim=-1) * mask
    out = teacher.output(x, batch)
    u = out.detach()
    z = _per_sentence_normal(batch, seed, "token", (probes, u.shape[-1])).to(u.device, u.dtype)  # [B, K, H]
    z = _orthogonal(z, u.unsqueeze(1)).transpose(0, 1)  # [K, B, H]
    (g,) = torch.autograd.grad(out, x, grad_outputs=z, is_grads_batched=True)  # [K, B, T, d]
    top = _top_eigenvalue(g / u.norm(dim=-1).view(1, -1, 1, 1), probes)
    return 0.5 * epsilon**2 * norms2 * top * mask


def _objective_grad(teacher: Teacher, embeds: torch.Tensor, batch: Batch, reference: torch.Tensor) -> torch.Tensor:
    x = embeds.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(teacher.objective(x, batch, reference).sum(), x)
    return g


def _probe_directions(
    batch: Batch, positions: list[int | None], embeds: torch.Tensor, seed: int, salt: str
) -> torch.Tensor:
    direction = torch.zeros_like(embeds)
    for b, p in enumerate(positions):
        if p is not None:
            v = torch.randn(embeds.shape[-1], generator=_generator(seed, batch.texts[b], f"{salt}:{p}"))
            direction[b, p] = (v / v.norm()).to(embeds.dtype)
    return direction


def _scale(norms: torch.Tensor, positions: list[int | None]) -> torch.Tensor:
    return torch.stack([norms[b, p] if p is not None else norms.new_zeros(()) for b, p in enumerate(positions)])


def _steps(norms: torch.Tensor, positions: list[int | None]) -> torch.Tensor:
    return (_FD_STEP * _scale(norms, positions)).view(-1, 1, 1)


def _gauss_newton_outputs(
    teacher: Teacher,
    batch: Batch,
    embeds: torch.Tensor,
    u: torch.Tensor,
    rounds: list[list[int | None]],
    directions: int,
    seed: int,
) -> list[torch.Tensor]:
    """For an encoder, H = Jᵀ P J / ‖u‖² exactly at δ = 0, so H v is a VJP of the output
    vector P J v / ‖u‖², with J v by a central difference of two forward passes (no graph)."""
    norms = embeds.norm(dim=-1)
    nu2 = (u * u).sum(-1, keepdim=True)
    out = []
    with torch.no_grad():
        for positions in rounds:
            step = _steps(norms, positions)
            for k in range(directions):
                v = _probe_directions(batch, positions, embeds, seed, f"pair{k}")
                jv = (teacher.output(embeds + step * v, batch) - teacher.output(embeds - step * v, batch)) / (
                    2 * step.view(-1, 1).clamp_min(1e-30)
                )
                out.append(_orthogonal(jv, u) / nu2)
    return out


def _coupling_rows(
    hv_norm: torch.Tensor, norms: torch.Tensor, positions: list[int | None], mask: torch.Tensor
) -> torch.Tensor:
    return hv_norm * norms * _scale(norms, positions).unsqueeze(1) * mask


def labels_and_coupling(
    teacher: Teacher,
    batch: Batch,
    rounds: list[list[int | None]],
    *,
    epsilon: float = DEFAULT_EPSILON,
    probes: int = DEFAULT_PROBES,
    directions: int = 1,
    seed: int = 0,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """`token_sensitivity` and one `pair_coupling` per round of probe positions, for an
    encoder in one forward pass with gradients and one batched backward pass (plus two
    gradient-free forward passes per coupling probe)."""
    if teacher.kind != "encoder" or not rounds:
        sens = token_sensitivity(teacher, batch, epsilon=epsilon, probes=probes, seed=seed)
        return sens, [pair_coupling(teacher, batch, r, directions=directions, seed=seed) for r in rounds]
    embeds = teacher.embed(batch.input_ids)
    norms = embeds.norm(dim=-1)
    mask = teacher.special_mask(batch).to(embeds.dtype)
    x = embeds.clone().requires_grad_(True)
    out = teacher.output(x, batch)
    u = out.detach()
    z = _per_sentence_normal(batch, seed, "token", (probes, u.shape[-1])).to(u.device, u.dtype)
    z = _orthogonal(z, u.unsqueeze(1)).transpose(0, 1)  # [K, B, H]
    gn = _gauss_newton_outputs(teacher, batch, embeds, u, rounds, directions, seed)
    (g,) = torch.autograd.grad(out, x, grad_outputs=torch.cat([z, torch.stack(gn)]), is_grads_batched=True)
    sens = _top_eigenvalue(g[:probes] / u.norm(dim=-1).view(1, -1, 1, 1), probes)
    sens = 0.5 * epsilon**2 * norms**2 * sens * mask
    hv = g[probes:].norm(dim=-1).view(len(rounds), directions, *embeds.shape[:2]).mean(1)
    return sens, [_coupling_rows(hv[r], norms, positions, mask) for r, positions in enumerate(rounds)]


def _top_eigenvalue(g: torch.Tensor, probes: int) -> torch.Tensor:
    gram = torch.einsum("kbtd,lbtd->btkl", g, g) / probes
    return torch.linalg.eigvalsh(gram)[..., -1].clamp_min(0)


def pair_coupling(
    teacher: Teacher, batch: Batch, positions: list[int | None], *, directions: int = 1, seed: int = 0
) -> torch.Tensor:
    """[B, T] coupling ‖H_jp v‖ of each position j with the probe position p = positions[b]
    (None: no probe in that sentence, row of zeros), averaged over random unit directions v.
    Scaled by ‖e_p‖ ‖e_j‖ so that it is the drift's response to relative perturbations.
    Encoders use H's Gauss-Newton form; other teachers a central difference of gradients."""
    embeds = teacher.embed(batch.input_ids)
    norms = embeds.norm(dim=-1)
    mask = teacher.special_mask(batch).to(embeds.dtype)
    if teacher.kind == "encoder":
        x = embeds.clone().requires_grad_(True)
        out = teacher.output(x, batch)
        gn = _gauss_newton_outputs(teacher, batch, embeds, out.detach(), [positions], directions, seed)
        (g,) = torch.autograd.grad(out, x, grad_outputs=torch.stack(gn), is_grads_batched=True)
        return _coupling_rows(g.norm(dim=-1).mean(0), norms, positions, mask)
    reference = teacher.reference(embeds, batch)
    step = _steps(norms, positions).to(embeds.dtype)
    total = torch.zeros(embeds.shape[:2], dtype=embeds.dtype, device=embeds.device)
    for k in range(directions):
        v = _probe_directions(batch, positions, embeds, seed, f"pair{k}")
        plus = _objective_grad(teacher, embeds + step * v, batch, reference)
        minus = _objective_grad(teacher, embeds - step * v, batch, reference)
        total += ((plus - minus) / (2 * step.clamp_min(1e-30))).norm(dim=-1)
    return _coupling_rows(total / directions, norms, positions, mask)


def exact_coupling(teacher: Teacher, batch: Batch, positions: list[int | None], *, seed: int = 0) -> torch.Tensor:
    """`pair_coupling` with one direction, by double backward (needs eager attention)."""
    embeds = teacher.embed(batch.input_ids)
    reference = teacher.reference(embeds, batch)
    x = embeds.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(teacher.objective(x, batch, reference).sum(), x, create_graph=True)
    v = _probe_directions(batch, positions, embeds, seed, "pair0")
    (hv,) = torch.autograd.grad((g * v).sum(), x)
    norms = embeds.norm(dim=-1)
    return _coupling_rows(hv.norm(dim=-1), norms, positions, teacher.special_mask(batch).to(hv.dtype))


def explicit_sensitivity(
    teacher: Teacher, batch: Batch, index: int, *, epsilon: float = DEFAULT_EPSILON, steps: int = 5, seed: int = 0
) -> torch.Tensor:
    """[T] drift of sentence `index` under a perturbation of size ε‖e_i‖ at each position i
    alone, found by projected gradient ascent from a random start (one copy per position)."""
    n = int(batch.attention_mask[index].sum())
    mask = teacher.special_mask(batch)[index, :n]
    positions = [i for i in range(n) if mask[i] > 0]
    result = torch.zeros(batch.input_ids.shape[1])
    if not positions:
        return result
    m = len(positions)
    ids = batch.input_ids[index : index + 1, :n].repeat(m, 1)
    copies = Batch(ids, batch.attention_mask[index : index + 1, :n].repeat(m, 1), [], [batch.texts[index]] * m)
    embeds = teacher.embed(ids)
    reference = teacher.reference(embeds, copies)
    select = torch.zeros(m, n, 1, dtype=embeds.dtype)
    for k, p in enumerate(positions):
        select[k, p] = 1
    radius = embeds.norm(dim=-1, keepdim=True) * epsilon * select
    gen = _generator(seed, batch.texts[index], "explicit")
    delta = torch.randn(embeds.shape, generator=gen).to(embeds.dtype) * select

    def project(d: torch.Tensor) -> torch.Tensor:
        return d / d.norm(dim=-1, keepdim=True).clamp_min(1e-30) * radius

    delta = project(delta)
    for _ in range(steps):
        delta.requires_grad_(True)
        (g,) = torch.autograd.grad(teacher.objective(embeds + delta, copies, reference).sum(), delta)
        with torch.no_grad():
            delta = project(delta + g / g.norm(dim=-1, keepdim=True).clamp_min(1e-30) * radius)
    with torch.no_grad():
        drift = teacher.objective(embeds + delta, copies, reference)
    result[positions] = drift.float()
    return result
