"""Tokenizing prompts for precise prefix routing: a local Hugging Face tokenizer on worker threads, and a bounded cache.

Imports only the framework; used by the ``token-producer`` plugin.
"""
