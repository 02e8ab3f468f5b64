"""Running a Program on every backend and checking it: the backends behind one interface
(`backends`: the reference interpreter, WASM, native, the torch op's CPU kernel), `expect`
examples (`expect`) and `heatc test`'s generated boundary inputs on every backend (`properties`).
"""
