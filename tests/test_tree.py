"""Token trees in plain torch: the tree rule is exact (chi-square of the first and the first two emitted
tokens on a toy Markov target, both child schemes), its known-bad variants fail the same tests, greedy
follows the argmax, an i.i.d. child is scored with its own q, the u = 0 and q(x) = 0 edges reject, and the tree
mask sees exactly the ancestors."""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch

from specviz.core.tree import TreeDraft, ancestors, decide_tree, tree_depths, tree_mask, tree_rule_q
from tests.toys import pooled_pvalue, zero_uniforms

pytestmark = pytest.mark.usefixtures("one_thread")

NUM_SAMPLES = 3_000
PASS_P = 1e-3
FAIL_P = 1e-6


def dist(*xs: float) -> torch.Tensor:
    t = torch.tensor(xs, dtype=torch.float32)
    return t / t.sum()


# A Markov toy over 5 tokens: the target's next-token distribution T[prev], the draft's Q[prev]. The draft's
# top-2 often contain the target's favourite but not always, so acceptance, sibling retries and residual
# draws all happen; Q's support differs from T's in places.
T = torch.stack([
    dist(0.4, 0.3, 0.2, 0.1, 0.0),
    dist(0.1, 0.2, 0.3, 0.4, 0.0),
    dist(0.5, 0.0, 0.1, 0.2, 0.2),
    dist(0.25, 0.25, 0.2, 0.2, 0.1),
    dist(0.0, 0.6, 0.3, 0.1, 0.0),
])  # fmt: skip
Q = torch.stack([
    dist(0.1, 0.5, 0.3, 0.1, 0.0),
    dist(0.3, 0.1, 0.1, 0.2, 0.3),
    dist(0.2, 0.2, 0.2, 0.2, 0.2),
    dist(0.0, 0.4, 0.4, 0.1, 0.1),
    dist(0.5, 0.1, 0.3, 0.1, 0.0),
])  # fmt: skip
V = T.shape[0]
START = 2


def toy_tree(prev: int, scheme: str, g: torch.Generator, width: int = 2) -> TreeDraft:
    """A full tree of depth 2: width children of the root, width children under each (6 nodes for width 2).
    distinct: the top-`width` tokens of Q (ties by id); iid: `width` independent samples from Q."""

    def kids(ctx: int) -> list[int]:
        if scheme == "distinct":
            return torch.sort(Q[ctx], descending=True, stable=True).indices[:width].tolist()
        return torch.multinomial(Q[ctx], width, replacement=True, generator=g).tolist()

    ids, parents, rows = [], [], []
    for x in kids(prev):
        ids.append(x), parents.append(-1), rows.append(Q[prev])
    for i in range(len(ids)):
        for y in kids(ids[i]):
            ids.append(y), parents.append(i), rows.append(Q[ids[i]])
    return TreeDraft(tuple(ids), tuple(parents), torch.stack(rows), scheme)


def emitted_tokens(scheme: str, n: int, count: int, **bad) -> tuple[torch.Tensor, dict[str, int]]:
    """n runs of tree rounds from START until `count` tokens are emitted -> (n, count) ids, and how often
    each fate of the round's last token came up (so tests can insist both paths ran)."""
    g = torch.Generator().manual_seed(0)
    out = torch.zeros(n, count, dtype=torch.long)
    seen = {"accepted": 0, "resampled": 0, "bonus": 0, "sibling_retry": 0}
    for s in range(n):
        toks = [START]
        while len(toks) < count + 1:
            tree = toy_tree(toks[-1], scheme, g)
            p_target = torch.stack([T[toks[-1]]] + [T[x] for x in tree.token_ids])  # (m+1, V)
            d = decide_tree(p_target, tree.token_ids, tree.parents, tree_rule_q(tree, V, "cpu"), g, **bad)
            toks += [tree.token_ids[i] for i in d.path] + [d.next_token]
            seen["accepted"] += len(d.path)
            seen[d.next_fate] += 1
            # a rejected first child followed by an accepted sibling: the retry path of the rule
            seen["sibling_retry"] += any(
                d.fates[i] == "accepted" and any(d.fates[j] == "rejected" for j in range(i) if tree.parents[j] == tree.parents[i])
                for i in range(len(tree.token_ids))
            )
        out[s] = torch.tensor(toks[1 : count + 1])
    return out, seen


@functools.cache
def runs(scheme: str, bad: str = "") -> tuple[torch.Tensor, dict[str, int]]:
    flags = {"drop": dict(_drop_rejected=False), "residual": dict(_resample_residual=False)}.get(bad, {})
    return emitted_tokens(scheme, NUM_SAMPLES, 2, **flags)


JOINT = T[START][:, None] * T  # (V, V): P(first = a, second = b)


@pytest.mark.parametrize("scheme", ["distinct", "iid"])
def test_first_emitted_token_follows_the_target(scheme):
    tokens, seen = runs(scheme)
    counts = torch.bincount(tokens[:, 0], minlength=V)
    assert pooled_pvalue(counts, T[START]) > PASS_P
    assert seen["accepted"] > 0 and seen["resampled"] > 0 and seen["bonus"] > 0 and seen["sibling_retry"] > 0


@pytest.mark.parametrize("scheme", ["distinct", "iid"])
def test_first_two_emitted_tokens_follow_the_target_jointly(scheme):
    tokens, _ = runs(scheme)
    counts = torch.bincount(tokens[:, 0] * V + tokens[:, 1], minlength=V * V)
    assert pooled_pvalue(counts, JOINT) > PASS_P


@pytest.mark.parametrize("scheme", ["distinct", "iid"])
@pytest.mark.parametrize("bad", ["drop", "residual"])
def test_known_bad_variants_fail(scheme, bad):
    """drop: keep p unchanged after a rejected sibling; residual: draw from p, not the residual, at the end."""
    tokens, _ = runs(scheme, bad)
    first = pooled_pvalue(torch.bincount(tokens[:, 0], minlength=V), T[START])
    joint = pooled_pvalue(torch.bincount(tokens[:, 0] * V + tokens[:, 1], minlength=V * V), JOINT)
    assert min(first, joint) < FAIL_P


def test_greedy_follows_the_child_equal_to_the_argmax():
    g = torch.Generator().manual_seed(0)
    one_hot = torch.eye(6)
    tree = TreeDraft((1, 2, 3, 4, 5), (-1, -1, 1, 1, 0))  # root -> {1, 2}; 2 -> {3, 4}; 1 -> {5}
    # target argmax: 2 at the root, 4 after node 1 (token 2), 0 after node 3 (token 4)
    rows = {0: 2, 1: 0, 2: 4, 3: 0, 4: 0, 5: 0}
    p_target = torch.stack([one_hot[rows[i]] for i in range(6)])
    d = decide_tree(p_target, tree.token_ids, tree.parents, tree_rule_q(tree, 6, "cpu"), g)
    assert d.path == (1, 3) and d.next_token == 0 and d.next_fate == "bonus"
    assert d.fates == ("rejected", "accepted", "rejected", "accepted", "discarded")
    d = decide_tree(p_target[[0]], (), (), torch.zeros(0, 6), g)
    assert (d.path, d.next_token, d.next_fate) == ((), 2, "target")


@contextlib.contextmanager
def reads():
    """Count the host reads (Tensor.item, Tensor.tolist) made inside the block."""
    count = {"tolist": 0, "item": 0}
    originals = {name: getattr(torch.Tensor, name) for name in count}

    def counted(name):
        def read(self, *args, **kwargs):
            count[name] += 1
            return originals[name](self, *args, **kwargs)

        return read

    for name in count:
        setattr(torch.Tensor, name, counted(name))
    try:
        yield count
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


@pytest.mark.parametrize("scheme", ["distinct", "iid"])
def test_greedy_takes_the_argmax_and_spends_no_random_number_but_the_uniforms(scheme):
    """With one-hot p (the temperature-0 warp) greedy=True decides what the race would, bit for bit (path, fates,
    accept probabilities, the p each child was tried against, the next token and its distribution), and leaves the
    generator where the m uniforms alone leave it: no race over the vocabulary, no residual; and reads the device back
    twice, not twice per tried child."""
    for seed in range(40):
        make = torch.Generator().manual_seed(seed)
        tree = toy_tree(int(torch.randint(V, (1,), generator=make)), scheme, make, width=2)
        m = len(tree.token_ids)
        rows = torch.randint(V, (m + 1,), generator=make).tolist()  # the target's argmax at the root and after each node
        for node in range(-1, m):  # often it is a drafted child (not always the first), so paths go deep
            kids = [tree.token_ids[c] for c, j in enumerate(tree.parents) if j == node]
            if kids and torch.rand(1, generator=make) < 0.6:
                rows[node + 1] = kids[int(torch.randint(len(kids), (1,), generator=make))]
        p_target = torch.eye(V)[rows]  # (m+1, V) one-hot
        q_rule = tree_rule_q(tree, V, "cpu")
        drawn, taken = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        a = decide_tree(p_target, tree.token_ids, tree.parents, q_rule, drawn)
        with reads() as count:
            b = decide_tree(p_target, tree.token_ids, tree.parents, q_rule, taken, greedy=True)
        assert count == {"tolist": 1, "item": 1}  # every node's numbers at once, then the argmax
        assert (b.path, b.next_token, b.next_fate, b.fates) == (a.path, a.next_token, a.next_fate, a.fates)
        assert (b.uniforms, b.accept_prob, b.p_current) == (a.uniforms, a.accept_prob, a.p_current)
        assert torch.equal(b.next_dist, a.next_dist)
        replay = torch.Generator().manual_seed(seed)
        torch.rand(m, generator=replay)
        assert torch.equal(taken.get_state(), replay.get_state())
        assert not torch.equal(drawn.get_state(), replay.get_state())  # the control: the race spends numbers


def test_all_children_rejected_resamples_without_them():
    g = torch.Generator().manual_seed(0)
    p = dist(0.5, 0.5, 0.0)
    tree = TreeDraft((0,), (-1,))
    hits = set()
    for _ in range(200):
        d = decide_tree(torch.stack([p, p]), tree.token_ids, tree.parents, tree_rule_q(tree, 3, "cpu"), g)
        if d.path == ():
            hits.add(d.next_token)
            assert d.next_dist.tolist() == [0.0, 1.0, 0.0]  # the rejected child is gone from p
    assert hits == {1}


def one_node(x: int, p: torch.Tensor, q: torch.Tensor, scheme: str = "iid") -> tuple[TreeDraft, torch.Tensor]:
    """A tree of one node x under the root, drafted from q; p_target is p at the root (and uniform after x)."""
    tree = TreeDraft((x,), (-1,), q.view(1, -1), scheme)
    return tree, torch.stack([p, torch.full_like(p, 1.0 / p.numel())])


def test_an_iid_node_is_scored_with_the_drafters_q():
    """An i.i.d. child is accepted with min(1, p(x) / q(x)) for the q it was drawn from; a one-hot q (the distinct
    scheme's) would be exact too, but accept only with p(x): here .25 instead of .5."""
    tree, p_target = one_node(1, dist(0.2, 0.25, 0.55), dist(0.3, 0.5, 0.2))
    q_rule = tree_rule_q(tree, 3, "cpu")
    assert torch.equal(q_rule, tree.q_draft)
    d = decide_tree(p_target, tree.token_ids, tree.parents, q_rule, torch.Generator().manual_seed(0))
    assert d.accept_prob == pytest.approx((0.5,)) and d.p_current == pytest.approx((0.25,))
    distinct = tree_rule_q(TreeDraft((1,), (-1,), tree.q_draft), 3, "cpu")
    assert distinct.tolist() == [[0.0, 1.0, 0.0]]  # the other scheme, for contrast


def test_a_node_the_target_forbids_is_rejected_even_at_u_zero(monkeypatch):
    """Keep a child when u < min(1, p/q): never at p(x) = 0, even for u = 0, whichever q the scheme uses."""
    zero_uniforms(monkeypatch)
    for scheme in ("iid", "distinct"):
        tree, p_target = one_node(2, dist(0.5, 0.5, 0.0), dist(0.2, 0.2, 0.6), scheme)
        d = decide_tree(p_target, tree.token_ids, tree.parents, tree_rule_q(tree, 3, "cpu"), torch.Generator().manual_seed(0))
        assert d.uniforms == (0.0,) and d.accept_prob == (0.0,), scheme
        assert d.path == () and d.fates == ("rejected",) and d.next_token in (0, 1), scheme


def test_an_iid_node_with_q_zero_is_rejected():
    """Never drafted by a correct drafter; if it is, the guard rejects it rather than dividing by zero."""
    tree, p_target = one_node(0, dist(0.6, 0.3, 0.1), dist(0.0, 0.5, 0.5))
    for seed in range(20):
        d = decide_tree(p_target, tree.token_ids, tree.parents, tree_rule_q(tree, 3, "cpu"), torch.Generator().manual_seed(seed))
        assert d.accept_prob == (0.0,) and d.path == () and d.fates == ("rejected",)


def test_tree_mask_sees_the_context_and_the_ancestors():
    parents = [-1, 0, 0, 1, -1]
    mask, depth = tree_mask(parents, cached=2)
    assert mask.shape == (1, 1, 5, 7) and depth.tolist() == tree_depths(parents) == [0, 1, 1, 2, 0]
    for i in range(5):
        seen = {j for j in range(5) if mask[0, 0, i, 2 + j]}
        assert seen == set(ancestors(parents, i)) and mask[0, 0, i, :2].all()


@pytest.mark.parametrize(
    "ids, parents", [((1, 2), (-1,)), ((1, 2), (0, -1)), ((1, 1), (-1, -1))], ids=["count", "order", "duplicate"]
)
def test_bad_trees_are_refused(ids, parents):
    with pytest.raises(ValueError):
        TreeDraft(ids, parents)
