"""formloop.codesign"""
