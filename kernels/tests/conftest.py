import os
import sys

# Tests import the package from this checkout without installing it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
