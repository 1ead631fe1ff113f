"""specula.llama_speculative — llama-cpp-python's prompt-lookup draft, by the same name:
`Llama(..., draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))` speculates with
specula's n-gram (prompt lookup) draft source, at most num_pred_tokens (1..32) per step.
Lossless: the text is the text without it."""


class LlamaPromptLookupDecoding:
    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        if num_pred_tokens < 1:
            raise ValueError("num_pred_tokens must be >= 1")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens
