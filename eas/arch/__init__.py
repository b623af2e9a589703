"""What a network is and what it costs, before anything runs.

genome (the Arch string: grammar, canonical form, hash), space (search spaces as data, with
search_spaces/*.yaml), reference (hand-designed networks as genomes), bounds (what a genome may
ask for), counting (params, MACs, memory counted from a genome, no torch), blocks and builder
(the torch network), profile (what the built network costs, counted on the module tree).
"""
