"""The decoding engine under lm-eval: the shared-prefix KV cache (``prefix_cache``), one greedy loop for
every greedy batch with drafted decoding (``drafted``, ``greedy_search``, ``draft_lookup``), the store of the
unedited model's answers (``drafts``), multiple-choice scoring with one context pass (``shared_context``) and
grouped-query attention in place on CPU (``gqa_attention``)."""
