"""Small real torch models shaped like the presets, for comparing the patterns with what torch issues.

``Gpt`` is GPT-2's shape (learned positions, LayerNorm with bias, fused qkv, GELU MLP, head tied to the
token embedding); ``Llama`` is Llama's (RMSNorm, grouped-query attention, SwiGLU, untied head, no biases).
Both take a commbench ModelDims, and ``spec_from_module`` turns a model back into a commbench model spec:
the root unit is every parameter outside the blocks, each block a layer unit, shapes as torch holds them.
"""

from typing import Any

import torch
from torch import nn
from torch.nn import functional

from commbench.patterns.models import ModelDims, ModelSpec, parse_model


class GptBlock(nn.Module):
    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        hidden = dims.hidden
        self.heads = dims.heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = nn.ModuleDict({"c_attn": nn.Linear(hidden, 3 * hidden),
                                   "c_proj": nn.Linear(hidden, hidden)})
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.ModuleDict({"c_fc": nn.Linear(hidden, dims.ffn),
                                  "c_proj": nn.Linear(dims.ffn, hidden)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        q, k, v = self.attn["c_attn"](self.ln_1(x)).split(hidden, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        attended = attended.transpose(1, 2).reshape(x.shape)
        x = x + self.attn["c_proj"](attended)
        return x + self.mlp["c_proj"](functional.gelu(self.mlp["c_fc"](self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        self.wte = nn.Embedding(dims.vocab, dims.hidden)
        self.wpe = nn.Embedding(dims.context, dims.hidden)
        self.h = nn.ModuleList(GptBlock(dims) for _ in range(dims.layers))
        self.ln_f = nn.LayerNorm(dims.hidden)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.h

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # the tied head


class LlamaBlock(nn.Module):
    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        hidden, head_dim = dims.hidden, dims.hidden // dims.heads
        kv = (dims.kv_heads or dims.heads) * head_dim
        self.heads, self.kv_heads = dims.heads, dims.kv_heads or dims.heads
        self.input_layernorm = nn.RMSNorm(hidden)
        self.self_attn = nn.ModuleDict({"q_proj": nn.Linear(hidden, hidden, bias=False),
                                        "k_proj": nn.Linear(hidden, kv, bias=False),
                                        "v_proj": nn.Linear(hidden, kv, bias=False),
                                        "o_proj": nn.Linear(hidden, hidden, bias=False)})
        self.post_attention_layernorm = nn.RMSNorm(hidden)
        self.mlp = nn.ModuleDict({"gate_proj": nn.Linear(hidden, dims.ffn, bias=False),
                                  "up_proj": nn.Linear(hidden, dims.ffn, bias=False),
                                  "down_proj": nn.Linear(dims.ffn, hidden, bias=False)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        h = self.input_layernorm(x)
        attn = self.self_attn
        q = attn["q_proj"](h).view(batch, length, self.heads, -1).transpose(1, 2)
        k, v = (attn[name](h).view(batch, length, self.kv_heads, -1).transpose(1, 2)
                for name in ("k_proj", "v_proj"))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + attn["o_proj"](attended.transpose(1, 2).reshape(x.shape))
        h = self.post_attention_layernorm(x)
        return x + self.mlp["down_proj"](functional.silu(self.mlp["gate_proj"](h)) * self.mlp["up_proj"](h))


class Llama(nn.Module):
    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(dims.vocab, dims.hidden)
        self.layers = nn.ModuleList(LlamaBlock(dims) for _ in range(dims.layers))
        self.norm = nn.RMSNorm(dims.hidden)
        self.lm_head = nn.Linear(dims.hidden, dims.vocab, bias=False)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.layers

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.norm(x))


def spec_document(model: nn.Module, dims: ModelDims, name: str) -> dict[str, Any]:
    """The commbench spec of a model (with .blocks): its root's parameters, then one unit per block."""
    in_blocks = {id(param) for block in model.blocks for param in block.parameters()}
    root = {param_name: list(param.shape) for param_name, param in model.named_parameters()
            if id(param) not in in_blocks}
    block = {param_name: list(param.shape) for param_name, param in model.blocks[0].named_parameters()}
    return {"name": name, "dims": {key: value for key, value in vars(dims).items() if value},
            "units": [{"name": "root", "root": True, "params": root},
                      {"name": "block", "repeat": len(model.blocks), "params": block}]}


def spec_from_module(model: nn.Module, dims: ModelDims, name: str) -> ModelSpec:
    return parse_model(spec_document(model, dims, name), f"{name} (a torch module)", name)


class MegatronBlock(nn.Module):
    """A transformer layer laid out as Megatron-LM lays it out for tensor parallelism: a fused q/k/v
    projection and a fused gate/up projection (column-parallel), the output and down projections
    (row-parallel), LayerNorm before each block (Megatron's default; DTensor's sharding of a fused
    RMSNorm's backward adds collectives of its own). Under tensor parallelism every rank computes its
    heads and its share of the MLP from its slice of the fused outputs."""

    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        hidden = dims.hidden
        self.head_dim = hidden // dims.heads
        self.attention_norm = nn.LayerNorm(hidden)
        self.attention = nn.ModuleDict({"wqkv": nn.Linear(hidden, 3 * hidden, bias=False),
                                        "wo": nn.Linear(hidden, hidden, bias=False)})
        self.ffn_norm = nn.LayerNorm(hidden)
        self.feed_forward = nn.ModuleDict({"w13": nn.Linear(hidden, 2 * dims.ffn, bias=False),
                                           "w2": nn.Linear(dims.ffn, hidden, bias=False)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attention_norm(x)
        q, k, v = self.attention["wqkv"](h).chunk(3, dim=-1)
        batch, length, width = q.shape
        q, k, v = (t.reshape(batch, length, width // self.head_dim, self.head_dim).transpose(1, 2)
                   for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attention["wo"](attended.transpose(1, 2).reshape(batch, length, width))
        gate, up = self.feed_forward["w13"](self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.feed_forward["w2"](functional.silu(gate) * up)
