"""Independently written, correct solutions to chapter 1's four graded functions, for the similarity check.

Each list holds twelve ways of writing one function, written for this test one by one, each with its own
choices of library calls, control flow and validation (the way twelve learners would differ). Learner ``i``
of the synthetic class submits variant ``i`` of every function. ``tests/test_similarity.py`` executes each
one against torch to prove it correct, then checks that no two learners are paired above the threshold.
"""

SOFTMAX = [
    '''
def softmax(x, dim=-1):
    if not isinstance(x, torch.Tensor) or not torch.is_floating_point(x):
        raise TypeError("x: expected a floating tensor")
    stable = torch.exp(x - torch.amax(x, dim=dim).unsqueeze(dim))
    return stable * (1 / torch.sum(stable, dim=dim)).unsqueeze(dim)
''',
    '''
def softmax(x, dim=-1):
    biggest = torch.max(x, dim=dim, keepdim=True).values
    numer = (x - biggest).exp()
    denom = numer.sum(dim, keepdim=True)
    return numer / denom
''',
    '''
def softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
''',
    '''
def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    top, _ = moved.max(-1)
    w = torch.exp(moved - top[..., None])
    w = w / w.sum(-1)[..., None]
    return w.movedim(-1, dim)
''',
    '''
def softmax(x, dim=-1):
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise TypeError(f"softmax expects floating point, got {x.dtype}")
    m = x.max(dim=dim, keepdim=True)[0]
    out = (x - m).exp()
    total = out.sum(dim=dim, keepdim=True)
    return out.div(total)
''',
    '''
def softmax(x, dim=-1):
    shift = x.detach().amax(dim, True)
    e = torch.sub(x, shift)
    e = torch.exp(e)
    return torch.div(e, torch.sum(e, dim, True))
''',
    '''
def softmax(x, dim=-1):
    centred = x - x.max(dim, keepdim=True).values
    log_norm = torch.log(torch.exp(centred).sum(dim, keepdim=True))
    return torch.exp(centred - log_norm)
''',
    '''
def softmax(x, dim=-1):
    def normalise(t):
        return t / t.sum(dim=dim, keepdim=True)
    peak = x.amax(dim=dim).unsqueeze(dim)
    return normalise((x - peak).exp())
''',
    '''
def softmax(x, dim=-1):
    out = x - x.amax(dim=dim, keepdim=True)
    out.exp_()
    out /= out.sum(dim=dim, keepdim=True)
    return out
''',
    '''
def softmax(x, dim=-1):
    assert x.is_floating_point(), "float input please"
    reference_point = torch.amax(x, dim, keepdim=True)
    powers = torch.exp(x - reference_point)
    sums = torch.sum(powers, dim=dim, keepdim=True)
    result = powers * sums.reciprocal()
    return result
''',
    '''
def softmax(x, dim=-1):
    d = dim % x.dim()
    mx = x
    for _ in range(1):
        mx = mx.amax(dim=d, keepdim=True)
    ex = (x - mx).exp()
    return ex / ex.sum(dim=d, keepdim=True)
''',
    '''
def softmax(x, dim=-1):
    lse = x.logsumexp(dim).unsqueeze(dim)
    log_probs = x - lse
    return log_probs.exp()
''',
]

POOLING = [
    '''
def attention_pooling(weights, values):
    n_keys = weights.shape[-1]
    ok = values.ndim >= 2 and values.shape[-2] == n_keys
    if not ok:
        raise ValueError(f"values: need {n_keys} rows")
    return torch.einsum("...ab,...bc->...ac", weights, values)
''',
    '''
def attention_pooling(weights, values):
    return torch.matmul(weights, values)
''',
    '''
def attention_pooling(weights, values):
    if weights.dim() < 2 or values.dim() < 2:
        raise ValueError("values must be (..., Tk, dv) and weights (..., Tq, Tk)")
    return torch.einsum("...qk,...kv->...qv", weights, values)
''',
    '''
def attention_pooling(weights, values):
    prod = weights.unsqueeze(-1) * values.unsqueeze(-3)
    return prod.sum(dim=-2)
''',
    '''
def attention_pooling(weights, values):
    rows = [weights[..., i, :].unsqueeze(-2) @ values for i in range(weights.shape[-2])]
    return torch.cat(rows, dim=-2)
''',
    '''
def attention_pooling(weights, values):
    tk = weights.size(-1)
    if values.size(-2) != tk:
        raise ValueError(f"values must have {tk} rows")
    acc = 0
    for j in range(tk):
        acc = acc + weights[..., :, j:j + 1] * values[..., j:j + 1, :]
    return acc
''',
    '''
def attention_pooling(weights, values):
    w, v = torch.broadcast_tensors(weights.unsqueeze(-1), values.unsqueeze(-3))
    return (w * v).sum(-2)
''',
    '''
def attention_pooling(weights, values):
    lead = torch.broadcast_shapes(weights.shape[:-2], values.shape[:-2])
    a = weights.expand(*lead, *weights.shape[-2:]).reshape(-1, *weights.shape[-2:])
    b = values.expand(*lead, *values.shape[-2:]).reshape(-1, *values.shape[-2:])
    return torch.bmm(a, b).reshape(*lead, weights.shape[-2], values.shape[-1])
''',
    '''
def attention_pooling(weights, values):
    out = values.transpose(-2, -1) @ weights.transpose(-2, -1)
    return out.transpose(-2, -1)
''',
    '''
def attention_pooling(weights, values):
    assert weights.shape[-1] == values.shape[-2], "key counts differ"
    return weights.matmul(values)
''',
    '''
def attention_pooling(weights, values):
    cols = []
    for c in range(values.shape[-1]):
        cols.append((weights * values[..., :, c].unsqueeze(-2)).sum(-1))
    return torch.stack(cols, dim=-1)
''',
    '''
def attention_pooling(weights, values):
    return torch.tensordot(weights, values, dims=([weights.dim() - 1], [values.dim() - 2])) if weights.dim() == 2 and values.dim() == 2 else torch.einsum("...ij,...jk->...ik", weights, values)
''',
]

SALIENCY = [
    '''
def saliency_weights(items, temperature=1.0):
    if temperature > 0:
        how_far = torch.norm(items - torch.mean(items, -2, True), p=2, dim=-1)
        return softmax(how_far / temperature)
    raise ValueError("temperature must be > 0")
''',
    '''
def saliency_weights(items, temperature=1.0):
    avg = items.mean(-2).unsqueeze(-2)
    gap = torch.sqrt(((items - avg) ** 2).sum(-1))
    return softmax(gap / temperature, dim=-1)
''',
    '''
def saliency_weights(items, temperature=1.0):
    assert temperature > 0
    deviations = items - torch.mean(items, dim=-2, keepdim=True)
    scores = torch.linalg.norm(deviations, dim=-1) / temperature
    return softmax(scores, -1)
''',
    '''
def saliency_weights(items, temperature=1.0):
    m = items.shape[-2]
    mean_item = items.sum(dim=-2, keepdim=True) / m
    salience = torch.linalg.vector_norm(items - mean_item, ord=2, dim=-1)
    return softmax(salience * (1.0 / temperature))
''',
    '''
def saliency_weights(items, temperature=1.0):
    if not temperature > 0:
        raise ValueError(f"bad temperature {temperature}")
    diff = items - items.mean(-2, True)
    return softmax(diff.pow(2).sum(-1).sqrt().div(temperature))
''',
    '''
def saliency_weights(items, temperature=1.0):
    centroid = torch.mean(items, -2)
    d = torch.cdist(items, centroid.unsqueeze(-2)).squeeze(-1)
    return softmax(d / temperature, dim=-1)
''',
    '''
def saliency_weights(items, temperature=1.0):
    out = []
    mu = items.mean(dim=-2, keepdim=True)
    for row in range(items.shape[-2]):
        out.append(torch.norm(items[..., row, :] - mu[..., 0, :], dim=-1))
    return softmax(torch.stack(out, -1) / temperature)
''',
    '''
def saliency_weights(items, temperature=1.0):
    tau = float(temperature)
    if tau <= 0.0:
        raise ValueError("temperature")
    sq = torch.einsum("...md,...md->...m", items - items.mean(-2, keepdim=True), items - items.mean(-2, keepdim=True))
    return softmax(sq.sqrt() / tau)
''',
    '''
def saliency_weights(items, temperature=1.0):
    offsets = items.sub(items.mean(dim=-2, keepdim=True))
    lengths = offsets.square().sum(dim=-1).sqrt()
    logits = lengths / temperature
    return softmax(logits, dim=logits.dim() - 1)
''',
    '''
def saliency_weights(items, temperature=1.0):
    if temperature <= 0:
        raise ValueError("temperature has to be positive")
    if items.ndim < 2:
        raise ValueError("items should be (..., m, d)")
    spread = torch.linalg.norm(items - items.mean(-2, keepdim=True), dim=-1)
    return softmax(spread.div(temperature), dim=-1)
''',
    '''
def saliency_weights(items, temperature=1.0):
    n_items = items.size(-2)
    centre = items.mean(dim=-2, keepdim=True).expand(*items.shape[:-2], n_items, items.size(-1))
    distance = torch.pairwise_distance(items.reshape(-1, items.size(-1)), centre.reshape(-1, items.size(-1)), eps=0.0)
    return softmax(distance.reshape(items.shape[:-1]) / temperature)
''',
    '''
def saliency_weights(items, temperature=1.0):
    x = items.double() if items.dtype == torch.float64 else items
    distances = (x - x.mean(-2, keepdim=True)).abs().pow(2).sum(-1).pow(0.5)
    return softmax(distances / temperature, -1)
''',
]

QUERY = [
    '''
def query_weights(query, items, temperature=1.0):
    if temperature > 0:
        return softmax(torch.einsum("...ad,...bd->...ab", query / temperature, items))
    raise ValueError("temperature must be > 0")
''',
    '''
def query_weights(query, items, temperature=1.0):
    logits = torch.matmul(query, items.mT) / temperature
    return softmax(logits)
''',
    '''
def query_weights(query, items, temperature=1.0):
    assert temperature > 0
    sim = torch.einsum("...qd,...md->...qm", query, items)
    return softmax(sim / temperature, -1)
''',
    '''
def query_weights(query, items, temperature=1.0):
    dots = (query.unsqueeze(-2) * items.unsqueeze(-3)).sum(-1)
    return softmax(dots * (1.0 / temperature), dim=-1)
''',
    '''
def query_weights(query, items, temperature=1.0):
    if query.shape[-1] != items.shape[-1]:
        raise ValueError("query and items need the same feature size")
    return softmax(query.matmul(items.transpose(-1, -2)).div(temperature))
''',
    '''
def query_weights(query, items, temperature=1.0):
    rows = []
    for i in range(query.shape[-2]):
        rows.append((items * query[..., i:i + 1, :]).sum(-1))
    return softmax(torch.stack(rows, dim=-2) / temperature)
''',
    '''
def query_weights(query, items, temperature=1.0):
    tau = temperature
    if not tau > 0:
        raise ValueError(f"temperature {tau} is not positive")
    affinity = query @ items.swapaxes(-1, -2)
    return softmax(affinity / tau, dim=affinity.ndim - 1)
''',
    '''
def query_weights(query, items, temperature=1.0):
    scaled_query = query / temperature
    return softmax(scaled_query @ items.transpose(-2, -1), dim=-1)
''',
    '''
def query_weights(query, items, temperature=1.0):
    kt = items.transpose(-2, -1).contiguous()
    return softmax(torch.matmul(query, kt) / float(temperature))
''',
    '''
def query_weights(query, items, temperature=1.0):
    if query.dim() < 2:
        raise ValueError("query must be (..., Tq, d)")
    match = torch.einsum("...id,...jd->...ij", query, items)
    return softmax(match.div(temperature), dim=-1)
''',
    '''
def query_weights(query, items, temperature=1.0):
    q = query.unsqueeze(-2)
    k = items.unsqueeze(-3)
    cos_like = (q * k).sum(dim=-1)
    return softmax(cos_like / temperature)
''',
    '''
def query_weights(query, items, temperature=1.0):
    return softmax(torch.matmul(items, query.transpose(-2, -1)).transpose(-2, -1) / temperature, dim=-1)
''',
]

FUNCTIONS = {"softmax": SOFTMAX, "attention_pooling": POOLING, "saliency_weights": SALIENCY,
             "query_weights": QUERY}


# Hostile cells for the scanner (tests/test_similarity.py, issue 41): the open strings of escaped quotes that drove
# the old tokenizer and its regular-expression fallback quadratic, and the `a,` that cost 0.7 GB per megabyte.
HOSTILE = {
    "open string of escaped quotes": lambda n: 'y = f(x)\nprint("' + '\\"' * (n // 2),
    "open triple-quoted string of escaped quotes": lambda n: 'y = f(x)\nprint("""' + '\\"' * (n // 2),
    "a, repeated": lambda n: "a," * (n // 2),
}


def ordinary_code(size: int) -> str:
    """``size`` characters of the corpus's solutions, repeated: the baseline a hostile cell is measured against."""
    unit = "\n\n".join(v.strip() for variants in FUNCTIONS.values() for v in variants) + "\n"
    return (unit * (size // len(unit) + 1))[:size]
