"""Checking rule sets against examples: `expect` examples (`expect`) and `heatc test`'s
generated boundary inputs on every backend (`properties`).
"""
