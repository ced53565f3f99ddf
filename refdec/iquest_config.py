"""The config class a LoopCoder folder carries beside its config.json (docs/checkpoints.md, LoopCoder).

vLLM reads an `iquestloopcoder` folder with --trust-remote-code: transformers imports the class
named by config.json's auto_map["AutoConfig"] from the folder. This is loopcert's own minimal
class (not the published file): a PretrainedConfig with model_type "iquestloopcoder" and the
fields the published config.json holds. refdec never imports it (nothing in a folder is executed
by loopcert); `refdec.checkpoints.write_published` writes it from this text.
"""

from __future__ import annotations

FILE = "configuration_iquestloopcoder.py"
CLASS = "IQuestLoopCoderConfig"
AUTO_MAP = {"AutoConfig": f"{FILE.removesuffix('.py')}.{CLASS}"}

SOURCE = '''\
"""IQuestLoopCoder configuration, written by loopcert (refdec/iquest_config.py)."""

from transformers import PretrainedConfig


# The fields of the published config.json this class holds, with their defaults
FIELDS = {
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "initializer_range": 0.02,
    "use_cache": True,
    "loop_num": 2,
    "loop_window_size": 8,
}


class IQuestLoopCoderConfig(PretrainedConfig):
    """A Llama stack looped loop_num times; passes >= 2 mix attention over pass 1's keys with a
    sliding window of loop_window_size over their own (loopcert docs/checkpoints.md, LoopCoder)."""

    model_type = "iquestloopcoder"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        tie_word_embeddings=False,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        **kwargs,
    ):
        for name, default in FIELDS.items():
            setattr(self, name, kwargs.pop(name, default))
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
'''
