"""formloop.chain"""
