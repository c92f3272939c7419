#!/bin/bash
#RSA_COLOUR=blue
