"""bigc data: the Python side of `bigc data encode --tokenizer` (python -m bigc_data encode ...).

Text (plain files, or JSON lines) is encoded with the user's own Hugging Face tokenizer
(`tokenizers`, a tokenizer.json) into llm.c's token file format, which `bigc run --data` reads.
See encode.py for the command line, tok.py for the tokenizer rules (separator, splitting of large
documents) and output.py for how files are written (atomically, or staged for the bigc driver).
"""
