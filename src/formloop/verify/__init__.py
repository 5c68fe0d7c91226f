"""formloop.verify"""
