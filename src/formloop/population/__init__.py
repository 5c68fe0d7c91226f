"""formloop.population"""
