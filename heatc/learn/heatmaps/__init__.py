"""From evidence to a heatmap: couplings and corpus statistics become cells within the
budget (`aggregate`), and the cells a heatmap document (`emit`).
"""
